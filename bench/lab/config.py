"""The xDS resources and the bootstrap both proxies run with.

One bootstrap (ADS, Delta, against the lab's control plane) starts Envoy and Outrider
alike; the control plane serves one resources file per (scenario, policy): a listener on
127.0.0.1:19150 routing everything, without retries, to the cluster `lab`, whose endpoints
are the scenario's backends.
"""

import json
import os

import two_hop

LISTEN_PORT = 19150
ADMIN_PORT = 19951
XDS_PORT = 18650

# CSWRR settings shared by every scenario: Envoy's defaults except a 5 s blackout (so a
# 20-40 s run shows the weights at work) and the error penalty written out, because
# Envoy's code reads an unset penalty as 0 while the API documents 1.0.
CSWRR = {
    "@type": "type.googleapis.com/envoy.extensions.load_balancing_policies."
    "client_side_weighted_round_robin.v3.ClientSideWeightedRoundRobin",
    "blackout_period": "5s",
    "weight_update_period": "1s",
    "error_utilization_penalty": 1.0,
}
SLOW_START = {"slow_start_window": "10s"}  # aggression: the default, 1.0


def typed(name, config):
    return {"load_balancing_policy": {"policies": [{"typed_extension_config": {"name": name, "typed_config": config}}]}}


# policy name → (cluster fields, proxies that implement it, what the name stands for)
POLICIES = {
    "round_robin": ({"lb_policy": "ROUND_ROBIN"}, ("envoy", "outrider"), "ROUND_ROBIN"),
    "least_request": ({"lb_policy": "LEAST_REQUEST"}, ("envoy", "outrider"), "LEAST_REQUEST (P2C)"),
    "least_request+outlier": (
        {"lb_policy": "LEAST_REQUEST", "outlier_detection": {"consecutive_5xx": 5, "max_ejection_percent": 50}},
        ("envoy", "outrider"),
        "LEAST_REQUEST with outlier detection: 5 consecutive 5xx eject for 30 s; max_ejection_percent 50 "
        "(Envoy's default 10 % ejects nothing among 5 hosts)",
    ),
    "cswrr": (
        typed("envoy.load_balancing_policies.client_side_weighted_round_robin", CSWRR),
        ("envoy", "outrider"),
        "client_side_weighted_round_robin, per-request ORCA, error_utilization_penalty 1.0, blackout 5 s",
    ),
    "cswrr_oob": (
        typed(
            "envoy.load_balancing_policies.client_side_weighted_round_robin",
            dict(CSWRR, enable_oob_load_report=True, oob_reporting_period="1s"),
        ),
        ("outrider",),
        "client_side_weighted_round_robin fed by out-of-band ORCA streams (1 s)",
    ),
    "peak_ewma": (
        typed("outrider.load_balancing_policies.peak_ewma", {"@type": "type.googleapis.com/google.protobuf.Struct", "value": {}}),
        ("outrider",),
        "Outrider's peak-EWMA P2C with its error penalty",
    ),
    "adaptive": (
        typed("outrider.load_balancing_policies.adaptive", {"@type": "type.googleapis.com/google.protobuf.Struct", "value": {}}),
        ("outrider",),
        "Outrider's adaptive policy: the lowest expected latency from the mean round trip, ORCA capacity and errors",
    ),
    "round_robin+slow_start": (
        {"lb_policy": "ROUND_ROBIN", "round_robin_lb_config": {"slow_start_config": SLOW_START}},
        ("envoy", "outrider"),
        "ROUND_ROBIN with slow start (10 s window, aggression 1)",
    ),
    "least_request+slow_start": (
        {"lb_policy": "LEAST_REQUEST", "least_request_lb_config": {"slow_start_config": SLOW_START}},
        ("envoy", "outrider"),
        "LEAST_REQUEST with slow start (10 s window, aggression 1)",
    ),
}


def bootstrap():
    return f"""# The one bootstrap both proxies run with in the scenario lab.
node: {{ id: lab~127.0.0.1~lab-1.default~default.svc.cluster.local, cluster: lab }}
admin: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {ADMIN_PORT} }} }} }}
dynamic_resources:
  ads_config:
    api_type: DELTA_GRPC
    transport_api_version: V3
    set_node_on_first_message_only: true
    grpc_services: [{{ envoy_grpc: {{ cluster_name: xds }} }}]
  lds_config: {{ ads: {{}}, initial_fetch_timeout: 0s, resource_api_version: V3 }}
  cds_config: {{ ads: {{}}, initial_fetch_timeout: 0s, resource_api_version: V3 }}
static_resources:
  clusters:
  - name: xds
    type: STATIC
    connect_timeout: 1s
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {{ http2_protocol_options: {{}} }}
    load_assignment:
      cluster_name: xds
      endpoints:
      - lb_endpoints:
        - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {XDS_PORT} }} }} }}
"""


def upstream_protocol(scenario):
    """HTTP/2 to the backends when the scenario's load is HTTP/2 or gRPC (the backends speak both)."""
    if scenario["load"].get("protocol") not in ("http2", "grpc"):
        return {}
    return {
        "typed_extension_protocol_options": {
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
                "explicit_http_config": {"http2_protocol_options": {}},
            }
        }
    }


def resources(scenario, policy, joined):
    """The resources file for one run; `joined` includes the backends that join later.
    A two-hop scenario's endpoints are the backends' sidecars (`two_hop`), reached over
    mutual TLS from an OUTBOUND listener."""
    cluster_fields = POLICIES[policy][0]
    ports = [b["port"] for b in scenario["backends"] if joined or "join_at" not in b]
    hop = {}
    listener_fields = {}
    if scenario.get("two_hop"):
        ports = [p + two_hop.SIDECAR_OFFSET for p in ports]
        hop = two_hop.upstream_transport(scenario["certificates"])
        listener_fields = {"traffic_direction": "OUTBOUND"}
    hcm = {
        "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
        "stat_prefix": "lab",
        "rds": {"route_config_name": "lab_routes", "config_source": {"ads": {}, "resource_api_version": "V3"}},
        "http_filters": [
            {
                "name": "envoy.filters.http.router",
                "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"},
            }
        ],
    }
    return {
        "resources": [
            {
                "@type": "type.googleapis.com/envoy.config.listener.v3.Listener",
                "name": "lab",
                "address": {"socket_address": {"address": "127.0.0.1", "port_value": LISTEN_PORT}},
                "filter_chains": [{"filters": [{"name": "envoy.filters.network.http_connection_manager", "typed_config": hcm}]}],
                **listener_fields,
            },
            {
                "@type": "type.googleapis.com/envoy.config.route.v3.RouteConfiguration",
                "name": "lab_routes",
                "virtual_hosts": [
                    {
                        "name": "lab",
                        "domains": ["*"],
                        "routes": [{"match": {"prefix": "/"}, "route": {"cluster": "lab", "timeout": "30s"}}],
                    }
                ],
            },
            dict(
                {
                    "@type": "type.googleapis.com/envoy.config.cluster.v3.Cluster",
                    "name": "lab",
                    "type": "EDS",
                    "connect_timeout": "1s",
                    "eds_cluster_config": {"eds_config": {"ads": {}, "resource_api_version": "V3"}},
                },
                **cluster_fields,
                **upstream_protocol(scenario),
                **hop,
            ),
            {
                "@type": "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment",
                "cluster_name": "lab",
                "endpoints": [
                    {
                        "lb_endpoints": [
                            {"endpoint": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": p}}}}
                            for p in ports
                        ]
                    }
                ],
            },
        ]
    }


def write_json(path, value):
    """Writes atomically, so the control plane never reads half a file."""
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(value, f, indent=1)
    os.replace(tmp, path)
