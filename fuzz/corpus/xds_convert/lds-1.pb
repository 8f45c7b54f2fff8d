
0.0.0.0≠u∂≥
-envoy.filters.network.http_connection_manager"Å
etype.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManageróagent"+)
backend*

/healthz/ready
agent*a
envoy.filters.http.router"D
Btype.googleapis.com/envoy.extensions.filters.http.router.v3.Router