"""Two hops: each scenario backend behind its own inbound sidecar, as in a mesh. The proxy
under test is the calling pod's sidecar (an OUTBOUND listener) and calls each backend's
sidecar (an INBOUND listener, mutual TLS with Istio-shaped SPIFFE identities) on the
backend's port + SIDECAR_OFFSET; the backend sidecars are the same proxy as the caller
(Outrider behind Outrider, Envoy behind Envoy) and run on CPU 0 with the backends and the
load. The backends send no ORCA: what an Outrider caller learns of their load comes from
their sidecars' reports.
"""

import os
import subprocess

SIDECAR_OFFSET = 1000
ADMIN_BASE = 19960
TRUST_DOMAIN = "cluster.local"
CLIENT_ID = f"spiffe://{TRUST_DOMAIN}/ns/default/sa/lab"
SERVER_ID = f"spiffe://{TRUST_DOMAIN}/ns/default/sa/backend"


def certificates(out):
    """A CA and two leaves (the backends' sidecars', the caller's), made with openssl;
    returns their file names."""
    files = {name: os.path.join(out, name) for name in
             ("ca.pem", "ca.key", "server.pem", "server.key", "client.pem", "client.key")}
    if all(os.path.exists(f) for f in files.values()):
        return files

    def openssl(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "2",
            "-subj", "/O=lab/CN=lab root", "-keyout", files["ca.key"], "-out", files["ca.pem"])
    for leaf, identity in (("server", SERVER_ID), ("client", CLIENT_ID)):
        csr = os.path.join(out, f"{leaf}.csr")
        openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                "-subj", f"/O=lab/CN={leaf}", "-addext", f"subjectAltName=URI:{identity}",
                "-keyout", files[f"{leaf}.key"], "-out", csr)
        openssl("x509", "-req", "-in", csr, "-CA", files["ca.pem"], "-CAkey", files["ca.key"], "-CAcreateserial",
                "-days", "2", "-copy_extensions", "copy", "-out", files[f"{leaf}.pem"])
    return files


def tls_context(files, leaf):
    return {
        "tls_certificates": [{"certificate_chain": {"filename": files[f"{leaf}.pem"]},
                              "private_key": {"filename": files[f"{leaf}.key"]}}],
        "validation_context": {"trusted_ca": {"filename": files["ca.pem"]}},
    }


def upstream_transport(files):
    """The caller's mutual TLS to a backend's sidecar (its cluster's transport socket)."""
    context = tls_context(files, "client")
    context["validation_context"]["match_typed_subject_alt_names"] = [
        {"san_type": "URI", "matcher": {"exact": SERVER_ID}}]
    return {"transport_socket": {"name": "envoy.transport_sockets.tls", "typed_config": {
        "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
        "common_tls_context": context, "sni": "backend.default.svc.cluster.local"}}}


def sidecar_bootstrap(index, backend_port, files, http2, in_pod=False):
    """A backend's sidecar: an INBOUND listener on the backend's port + SIDECAR_OFFSET
    (mutual TLS, the caller's identity required) in front of the backend.

    A backend not `in_pod` shares the machine's cgroup with every other process of the
    run, so an Outrider sidecar's CPU reading (`OUTRIDER_APP_CPU`, `auto` reads the cgroup
    it is in) would be the whole machine's use, the same figure for every backend; it is
    turned off there, as `auto` turns it off in a Kubernetes container, and the reports
    carry the application's concurrency alone. Envoy ignores the key."""
    context = tls_context(files, "server")
    context["validation_context"]["match_typed_subject_alt_names"] = [
        {"san_type": "URI", "matcher": {"exact": CLIENT_ID}}]
    context["alpn_protocols"] = ["h2", "http/1.1"]
    hcm = {
        "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
        "stat_prefix": "inbound",
        "route_config": {"name": "inbound", "virtual_hosts": [{"name": "app", "domains": ["*"], "routes": [
            {"match": {"prefix": "/"}, "route": {"cluster": "app", "timeout": "30s"}}]}]},
        "http_filters": [{"name": "envoy.filters.http.router",
                          "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}}],
    }
    cluster = {
        "name": "app", "type": "STATIC", "connect_timeout": "1s",
        "load_assignment": {"cluster_name": "app", "endpoints": [{"lb_endpoints": [{"endpoint": {"address": {
            "socket_address": {"address": "127.0.0.1", "port_value": backend_port}}}}]}]},
    }
    if http2:
        cluster["typed_extension_protocol_options"] = {"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
            "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
            "explicit_http_config": {"http2_protocol_options": {}}}}
    return {
        "node": {"id": f"sidecar~127.0.0.1~backend-{index}.default~default.svc.cluster.local", "cluster": "backend",
                 "metadata": {} if in_pod else {"OUTRIDER_APP_CPU": "off"}},
        "admin": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": ADMIN_BASE + index}}},
        "static_resources": {
            "listeners": [{
                "name": "inbound",
                "address": {"socket_address": {"address": "127.0.0.1", "port_value": backend_port + SIDECAR_OFFSET}},
                "traffic_direction": "INBOUND",
                "filter_chains": [{
                    "transport_socket": {"name": "envoy.transport_sockets.tls", "typed_config": {
                        "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext",
                        "require_client_certificate": True, "common_tls_context": context}},
                    "filters": [{"name": "envoy.filters.network.http_connection_manager", "typed_config": hcm}],
                }],
            }],
            "clusters": [cluster],
        },
    }
