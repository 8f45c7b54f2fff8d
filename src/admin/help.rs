//! The list of admin endpoints: `/help` as Envoy prints it, and the index page at `/`.

/// Every endpoint with a one-line description, in the order `/help` lists them.
pub const ENDPOINTS: &[(&str, &str)] = &[
    ("/", "Admin home page"),
    ("/balancing", "live balancing: each endpoint's share of picks, latency, errors, utilization"),
    ("/balancing.json", "the counters /balancing polls"),
    ("/certs", "print certs on machine"),
    ("/clusters", "upstream cluster status (format=json)"),
    ("/config_dump", "dump current Outrider configs"),
    ("/drain_listeners", "drain listeners (POST; inboundonly, graceful)"),
    ("/healthcheck/fail", "cause the server to fail health checks (POST)"),
    ("/healthcheck/ok", "cause the server to pass health checks (POST)"),
    ("/healthz", "the admin server answers"),
    ("/help", "print out list of admin commands"),
    ("/listeners", "print listener info (format=json)"),
    ("/logging", "query/change logging levels (POST to change)"),
    ("/memory", "print current allocation/heap usage"),
    ("/quitquitquit", "exit the server (POST)"),
    ("/ready", "print server state, return 200 if LIVE, otherwise return 503"),
    ("/reset_counters", "reset all counters to zero (POST)"),
    ("/runtime", "print runtime values"),
    ("/server_info", "print server version/status information"),
    ("/stats", "print server stats (filter, usedonly, format=json|prometheus)"),
    ("/stats/prometheus", "print server stats in prometheus format"),
];

pub fn text() -> String {
    let mut out = String::from("admin commands are:\n");
    for (path, help) in ENDPOINTS {
        out.push_str(&format!("  {path}: {help}\n"));
    }
    out
}

pub fn html() -> String {
    let mut out = String::from("<!DOCTYPE html>\n<html><head><title>Outrider Admin</title></head><body>\n<table>\n");
    for (path, help) in ENDPOINTS {
        out.push_str(&format!("<tr><td><a href=\"{path}\">{path}</a></td><td>{help}</td></tr>\n"));
    }
    out.push_str("</table>\n</body></html>\n");
    out
}
