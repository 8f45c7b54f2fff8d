#!/usr/bin/env python3
"""Bootstraps for bench/waypoint-bench.sh.

The waypoint's: istiod's own rendering of a waypoint (tests/data/istio/waypoint-istiod.config_dump.json: the listeners,
clusters and endpoints a real istiod in Kubernetes mode sent an Outrider waypoint for a
Service bound to it, with an HTTPRoute and an AuthorizationPolicy; captured from
tests/mesh/waypoint.rs), made static for a run on loopback:
  - the SDS secrets (`default`, `ROOTCA`) become the bench's certificate files;
  - the EDS cluster gets istiod's endpoints, the pod's address replaced by the bench
    backend's (an HBONE terminator on 127.0.0.2:15008, in front of nginx);
  - `connect_terminate` listens on 127.0.0.1:15008;
  - access logs are dropped (a default Istio install has none; the test's mesh turned
    them on);
  - waypoint-envoy.json also drops Istio's two filters that Envoy 1.40 does not have
    (`io.istio.http.peer_metadata.Config`, the TCP `MetadataExchange`): both only observe.
The HBONE client's (ztunnel's part) and the backend terminator's are written here.

  bootstraps.py DIR CERTS   writes DIR/waypoint.json, DIR/waypoint-envoy.json,
                            DIR/client.json and DIR/backend.json (CERTS: ca.pem and
                            waypoint, sleep and echo .pem/.key); prints the VIP:port the
                            client tunnels to
"""

import argparse
import copy
import json
import pathlib

HERE = pathlib.Path(__file__).resolve().parent
ISTIO_ONLY = {
    "type.googleapis.com/io.istio.http.peer_metadata.Config",
    "type.googleapis.com/envoy.tcp.metadataexchange.config.MetadataExchange",
}
WAYPOINT = ("127.0.0.1", 15008)
BACKEND = ("127.0.0.2", 15008)
CLIENT = ("127.0.0.1", 18000)
NGINX = ("127.0.0.1", 18080)
ADMIN = {"address": {"socketAddress": {"address": "127.0.0.1", "portValue": 15000}}}


def address(host, port):
    return {"socketAddress": {"address": host, "portValue": port}}


def rendering():
    """istiod's listeners, clusters and endpoints (by cluster name)."""
    dump = json.loads((HERE.parent.parent / "tests/data/istio/waypoint-istiod.config_dump.json").read_text())
    listeners, clusters, endpoints = [], [], {}
    for config in dump["configs"]:
        kind = config["@type"].rsplit(".", 1)[-1]
        if kind == "ListenersConfigDump":
            listeners += [entry["activeState"]["listener"] for entry in config.get("dynamicListeners", [])]
        elif kind == "ClustersConfigDump":
            clusters += [entry["cluster"] for entry in config.get("dynamicActiveClusters", [])]
        elif kind == "ClusterLoadAssignment":
            endpoints[config["clusterName"]] = config
    # A resource in a bootstrap is a message, not an Any: no type.
    for resource in listeners + clusters + list(endpoints.values()):
        resource.pop("@type", None)
    return listeners, clusters, endpoints


def walk(node, visit):
    """Calls visit(dict) on every object, depth first; visit may change it in place."""
    if isinstance(node, dict):
        visit(node)
        for value in list(node.values()):
            walk(value, visit)
    elif isinstance(node, list):
        for value in node:
            walk(value, visit)


def secrets_from_files(certs):
    """The SDS secrets `default` and `ROOTCA` as the waypoint's certificate files."""

    def visit(node):
        context = node.get("commonTlsContext")
        if not isinstance(context, dict):
            return
        if context.pop("tlsCertificateSdsSecretConfigs", None) is not None:
            context["tlsCertificates"] = [{
                "certificateChain": {"filename": str(certs / "waypoint.pem")},
                "privateKey": {"filename": str(certs / "waypoint.key")},
            }]
        combined = context.pop("combinedValidationContext", None)
        if combined is not None:
            validation = combined.get("defaultValidationContext", {})
            validation["trustedCa"] = {"filename": str(certs / "ca.pem")}
            context["validationContext"] = validation

    return visit


def drop_access_logs(node):
    node.pop("accessLog", None)


def drop_istio_only(node):
    for key in ("httpFilters", "filters"):
        if isinstance(node.get(key), list):
            node[key] = [f for f in node[key] if f.get("typedConfig", {}).get("typeUrl") not in ISTIO_ONLY]


def waypoint(certs, envoy_compatible):
    listeners, clusters, endpoints = rendering()
    resources = {"listeners": copy.deepcopy(listeners), "clusters": copy.deepcopy(clusters)}
    walk(resources, secrets_from_files(certs))
    walk(resources, drop_access_logs)
    if envoy_compatible:
        walk(resources, drop_istio_only)
    for listener in resources["listeners"]:
        if listener["name"] == "connect_terminate":
            listener["address"] = address(*WAYPOINT)
    backend = f"{BACKEND[0]}:5678"
    for cluster in resources["clusters"]:
        if cluster.get("type") != "EDS":
            continue
        assignment = copy.deepcopy(endpoints[cluster["name"]])
        for locality in assignment["endpoints"]:
            for lb in locality["lbEndpoints"]:
                lb["endpoint"]["address"]["envoyInternalAddress"]["endpointId"] = backend
                lb["metadata"]["filterMetadata"]["envoy.filters.listener.original_dst"]["local"] = backend
        cluster["type"] = "STATIC"
        cluster.pop("edsClusterConfig", None)
        cluster["loadAssignment"] = assignment
    return {
        "node": {"id": "waypoint~127.0.0.1~waypoint-0.default~default.svc.cluster.local", "cluster": "waypoint.default"},
        "admin": ADMIN,
        # Envoy serves internal listeners only with this extension; Outrider always does.
        "bootstrapExtensions": [{
            "name": "envoy.bootstrap.internal_listener",
            "typedConfig": {
                "@type": "type.googleapis.com/envoy.extensions.bootstrap.internal_listener.v3.InternalListener",
            },
        }],
        "staticResources": resources,
    }


def vip():
    """The Service address and port main_internal serves (the client's CONNECT authority)."""
    listeners, _, _ = rendering()
    main = next(listener for listener in listeners if listener["name"] == "main_internal")
    tree = main["filterChainMatcher"]["matcherTree"]
    ranges = tree["customMatch"]["typedConfig"]["rangeMatchers"][0]
    ip = ranges["ranges"][0]["addressPrefix"]
    port = next(iter(ranges["onMatch"]["matcher"]["matcherTree"]["exactMatchMap"]["map"]))
    return f"{ip}:{port}"


def tls_context(certs, name, peer):
    return {
        "tlsParams": {"tlsMinimumProtocolVersion": "TLSv1_3", "tlsMaximumProtocolVersion": "TLSv1_3"},
        "alpnProtocols": ["h2"],
        "tlsCertificates": [{
            "certificateChain": {"filename": str(certs / f"{name}.pem")},
            "privateKey": {"filename": str(certs / f"{name}.key")},
        }],
        "validationContext": {
            "trustedCa": {"filename": str(certs / "ca.pem")},
            "matchTypedSubjectAltNames": [{"sanType": "URI", "matcher": {"exact": peer}}],
        },
    }


def spiffe(account):
    return f"spiffe://cluster.local/ns/default/sa/{account}"


def http2_options():
    return {"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
        "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
        "explicitHttpConfig": {"http2ProtocolOptions": {}},
    }}


def static_cluster(name, host_port, **fields):
    """A STATIC cluster `name` of one endpoint at `host_port`, with more of its `fields`."""
    return {
        "name": name,
        "type": "STATIC",
        "connectTimeout": "5s",
        "loadAssignment": {"clusterName": name, "endpoints": [
            {"lbEndpoints": [{"endpoint": {"address": address(*host_port)}}]}]},
        **fields,
    }


def client(certs):
    """ztunnel's part: each connection to CLIENT tunnelled to the waypoint as
    `CONNECT <vip>`, over mutual TLS as `sleep`."""
    return {
        "admin": {"address": address("127.0.0.1", 15100)},
        "staticResources": {
            "listeners": [{
                "name": "client",
                "address": address(*CLIENT),
                "filterChains": [{"filters": [{
                    "name": "envoy.filters.network.tcp_proxy",
                    "typedConfig": {
                        "@type": "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy",
                        "statPrefix": "client",
                        "cluster": "waypoint",
                        "tunnelingConfig": {"hostname": vip()},
                    },
                }]}],
            }],
            "clusters": [static_cluster(
                "waypoint",
                WAYPOINT,
                typedExtensionProtocolOptions=http2_options(),
                transportSocket={"name": "tls", "typedConfig": {
                    "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
                    "commonTlsContext": tls_context(certs, "sleep", spiffe("waypoint")),
                }},
            )],
        },
    }


def backend(certs):
    """The destination pod's part: HBONE terminated (mutual TLS, the waypoint's identity
    required), each tunnel's bytes to nginx."""
    router = {"name": "envoy.filters.http.router", "typedConfig": {
        "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}}
    manager = {
        "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
        "statPrefix": "backend",
        "codecType": "HTTP2",
        "http2ProtocolOptions": {"allowConnect": True},
        "upgradeConfigs": [{"upgradeType": "CONNECT"}],
        "httpFilters": [router],
        "routeConfig": {"virtualHosts": [{"name": "all", "domains": ["*"], "routes": [{
            "match": {"connectMatcher": {}},
            "route": {"cluster": "nginx", "upgradeConfigs": [{"upgradeType": "CONNECT", "connectConfig": {}}]},
        }]}]},
    }
    context = tls_context(certs, "echo", spiffe("waypoint"))
    return {
        "admin": {"address": address("127.0.0.1", 15200)},
        "staticResources": {
            "listeners": [{
                "name": "backend",
                "address": address(*BACKEND),
                "filterChains": [{
                    "filters": [{"name": "envoy.filters.network.http_connection_manager", "typedConfig": manager}],
                    "transportSocket": {"name": "tls", "typedConfig": {
                        "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext",
                        "requireClientCertificate": True,
                        "commonTlsContext": context,
                    }},
                }],
            }],
            "clusters": [static_cluster("nginx", NGINX)],
        },
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dir", type=pathlib.Path)
    parser.add_argument("certs", type=pathlib.Path)
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    certs = args.certs.resolve()
    (args.dir / "waypoint.json").write_text(json.dumps(waypoint(certs, False), indent=1))
    (args.dir / "waypoint-envoy.json").write_text(json.dumps(waypoint(certs, True), indent=1))
    (args.dir / "client.json").write_text(json.dumps(client(certs), indent=1))
    (args.dir / "backend.json").write_text(json.dumps(backend(certs), indent=1))
    print(vip())


if __name__ == "__main__":
    main()
