//! Structured xDS configurations for the runtime fuzzer: listeners (a connection manager
//! with its routes inline or over RDS and a few HTTP filters, or a TCP proxy), route
//! configurations, clusters (STATIC or EDS, every balancing policy, circuit breakers,
//! outlier detection, health checks) and endpoints, drawn from a seeded RNG.
//!
//! Most values are valid, some sit at the legal extremes (durations of 9 223 372 035 s,
//! `u32::MAX` weights and counts, priority 128, the largest ring and maglev tables) and a
//! few break a rule, so that NACKs are exercised too. Every value stays representable in
//! the protos: an invalid resource is one Outrider must refuse, never one the test cannot
//! encode.
//!
//! Two rules keep "every request ends" a fair invariant: endpoints are only the loopback
//! backends the test started (they answer at once), and nothing generated may hold a
//! request for long on purpose (fault delays are short; retries only follow upstream
//! failures, which healthy backends do not produce).

use rand::Rng;
use rand::rngs::SmallRng;
use serde_json::{Value, json};

/// Resource names are drawn from small pools, so that steps replace, remove and re-add
/// the same resources and references between them often resolve.
pub const CLUSTERS: [&str; 5] = ["c0", "c1", "c2", "c3", "c4"];
pub const ROUTES: [&str; 3] = ["r0", "r1", "r2"];
pub const LISTENERS: [&str; 4] = ["l0", "l1", "l2", "l3"];

/// Hosts and paths the client sends, matching (or not) what routes are generated with.
pub const HOSTS: [&str; 5] = ["example.com", "a.example.com", "example.org", "other.test", "example.com:8080"];
pub const PATHS: [&str; 7] = ["/", "/a", "/a/b", "/exact", "/r42", "/healthz", "/moved"];

const TYPE: &str = "type.googleapis.com/envoy.extensions";

/// One generated configuration: the whole set of every type.
#[derive(Debug, Clone, Default)]
pub struct Config {
    pub clusters: Vec<Value>,
    pub endpoints: Vec<Value>,
    pub listeners: Vec<Value>,
    pub routes: Vec<Value>,
}

impl Config {
    pub fn resources(&self) -> usize {
        self.clusters.len() + self.endpoints.len() + self.listeners.len() + self.routes.len()
    }
}

pub struct Generator {
    rng: SmallRng,
    /// The loopback ports listeners may take.
    listener_ports: Vec<u16>,
    /// The loopback backends endpoints may point at.
    backend_ports: Vec<u16>,
    /// Whether the resource being drawn may break a rule (decided once per resource, so
    /// that a resource with a hundred endpoints is not always invalid).
    breaking: bool,
    /// Whether the largest ring (8M entries) may be drawn: legal, but its build takes
    /// seconds in a release build and tens of seconds in a debug one, on the thread that
    /// also serves ADS (as on Envoy's main thread), so only long runs enable it.
    heavy: bool,
}

impl Generator {
    pub fn new(rng: SmallRng, listener_ports: Vec<u16>, backend_ports: Vec<u16>, heavy: bool) -> Self {
        Self { rng, listener_ports, backend_ports, breaking: false, heavy }
    }

    /// A whole configuration: a random subset of each pool.
    pub fn config(&mut self) -> Config {
        Config {
            clusters: self.subset(&CLUSTERS).into_iter().map(|n| self.cluster(n)).collect(),
            endpoints: self.subset(&CLUSTERS).into_iter().map(|n| self.assignment(n)).collect(),
            listeners: self.subset(&LISTENERS).into_iter().map(|n| self.listener(n)).collect(),
            routes: self.subset(&ROUTES).into_iter().map(|n| self.route_config(n)).collect(),
        }
    }

    /// The next configuration: mostly `previous` with one type regenerated, sometimes a
    /// whole new one.
    pub fn next(&mut self, previous: &Config) -> Config {
        let mut next = previous.clone();
        match self.rng.random_range(0..6) {
            0 => next = self.config(),
            1 => next.clusters = self.subset(&CLUSTERS).into_iter().map(|n| self.cluster(n)).collect(),
            2 => next.endpoints = self.subset(&CLUSTERS).into_iter().map(|n| self.assignment(n)).collect(),
            3 => next.listeners = self.subset(&LISTENERS).into_iter().map(|n| self.listener(n)).collect(),
            4 => next.routes = self.subset(&ROUTES).into_iter().map(|n| self.route_config(n)).collect(),
            _ => {
                // Endpoints churn most in a mesh.
                next.endpoints = self.subset(&CLUSTERS).into_iter().map(|n| self.assignment(n)).collect();
                next.clusters = self.subset(&CLUSTERS).into_iter().map(|n| self.cluster(n)).collect();
            }
        }
        next
    }

    // === draws ===

    fn chance(&mut self, one_in: u32) -> bool {
        self.rng.random_range(0..one_in) == 0
    }

    fn pick<T: Clone>(&mut self, items: &[T]) -> T {
        items[self.rng.random_range(0..items.len())].clone()
    }

    fn subset<'a>(&mut self, names: &[&'a str]) -> Vec<&'a str> {
        names.iter().copied().filter(|_| self.rng.random_bool(0.6)).collect()
    }

    /// Starts drawing a resource: one in ten may break a rule.
    fn resource(&mut self) {
        self.breaking = self.chance(10);
    }

    /// Whether this value should break a rule: only in a breaking resource, and then not
    /// every value of it, so that which rule is broken varies.
    fn invalid(&mut self) -> bool {
        self.breaking && self.chance(4)
    }

    /// A duration where zero means "disabled": zero, small, large, the largest Envoy takes.
    fn duration_or_zero(&mut self) -> Value {
        if self.invalid() {
            return json!(self.pick(&["9223372036s", "315576000000s"]));
        }
        json!(self.pick(&["0s", "0.001s", "0.25s", "1s", "15s", "3600s", "9223372035s", "9223372035.999999999s"]))
    }

    /// A duration that must be positive.
    fn positive_duration(&mut self) -> Value {
        if self.invalid() {
            return json!(self.pick(&["0s", "9223372036s"]));
        }
        json!(self.pick(&["0.001s", "0.25s", "1s", "15s", "9223372035s"]))
    }

    /// Two positive durations, the second not shorter (a base and its maximum), unless
    /// breaking.
    fn ordered_durations(&mut self) -> (Value, Value) {
        const ORDERED: [&str; 5] = ["0.001s", "0.25s", "1s", "15s", "9223372035s"];
        if self.invalid() {
            return (json!("15s"), json!("1s"));
        }
        let base = self.rng.random_range(0..ORDERED.len());
        let max = self.rng.random_range(base..ORDERED.len());
        (json!(ORDERED[base]), json!(ORDERED[max]))
    }

    /// A count where 0 is legal.
    fn count(&mut self) -> u32 {
        self.pick(&[0, 1, 2, 3, 100, u32::MAX])
    }

    fn weight(&mut self) -> u32 {
        if self.invalid() {
            return 0;
        }
        self.pick(&[1, 1, 2, 7, 100, u32::MAX / 2, u32::MAX])
    }

    fn backend(&mut self) -> u16 {
        let ports = self.backend_ports.clone();
        self.pick(&ports)
    }

    fn socket(&self, port: u16) -> Value {
        json!({ "socket_address": { "address": "127.0.0.1", "port_value": port } })
    }

    // === clusters ===

    fn cluster(&mut self, name: &str) -> Value {
        self.resource();
        let mut cluster = json!({ "name": name, "connect_timeout": self.positive_duration() });
        if self.chance(2) {
            cluster["type"] = json!("EDS");
            cluster["eds_cluster_config"] =
                json!({ "eds_config": { "ads": {}, "initial_fetch_timeout": "0s", "resource_api_version": "V3" } });
        } else {
            cluster["type"] = json!("STATIC");
            cluster["load_assignment"] = self.assignment(name);
        }
        self.lb_policy(&mut cluster);
        if self.chance(3) {
            let [c, p, r, t] = [self.count(), self.count(), self.count(), self.count()];
            cluster["circuit_breakers"] = json!({ "thresholds": [{
                "priority": "DEFAULT", "max_connections": c, "max_pending_requests": p,
                "max_requests": r, "max_retries": t,
            }] });
        }
        if self.chance(3) {
            let percent = if self.invalid() { 101 } else { self.pick(&[0, 10, 100]) };
            let (base, max) = self.ordered_durations();
            cluster["outlier_detection"] = json!({
                "consecutive_5xx": self.count(),
                "interval": self.positive_duration(),
                "base_ejection_time": base,
                "max_ejection_time": max,
                "max_ejection_percent": percent,
            });
        }
        if self.chance(4) {
            cluster["health_checks"] = json!([self.health_check()]);
        }
        if self.chance(3) {
            cluster["typed_extension_protocol_options"] = json!({
                "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                    "@type": format!("{TYPE}.upstreams.http.v3.HttpProtocolOptions"),
                    "explicit_http_config": { "http2_protocol_options": {} },
                }
            });
        }
        cluster
    }

    fn lb_policy(&mut self, cluster: &mut Value) {
        match self.rng.random_range(0..5) {
            0 => cluster["lb_policy"] = json!("ROUND_ROBIN"),
            1 => {
                cluster["lb_policy"] = json!("LEAST_REQUEST");
                let choices = if self.invalid() { 1 } else { self.pick(&[2, 3, 100, u32::MAX]) };
                cluster["least_request_lb_config"] = json!({ "choice_count": choices });
            }
            2 => cluster["lb_policy"] = json!("RANDOM"),
            3 => {
                cluster["lb_policy"] = json!("RING_HASH");
                // The largest minimum builds an 8M-entry ring, and so does the largest
                // maximum when weights are extreme (a host of weight 1 beside one of
                // u32::MAX needs the whole ring): see `heavy`.
                let largest = if self.heavy { 8_388_608 } else { 65_536 };
                let minimum = if self.chance(25) { largest } else { self.pick(&[1, 2, 1024]) };
                let maximum = if self.invalid() {
                    8_388_609
                } else if self.chance(8) {
                    largest
                } else {
                    self.pick(&[1024, 65_536])
                };
                cluster["ring_hash_lb_config"] = json!({ "minimum_ring_size": minimum, "maximum_ring_size": maximum });
            }
            _ => {
                cluster["lb_policy"] = json!("MAGLEV");
                let size = if self.invalid() {
                    self.pick(&[100, 5_000_012])
                } else if self.chance(25) {
                    5_000_011
                } else {
                    self.pick(&[2, 3, 65_537])
                };
                cluster["maglev_lb_config"] = json!({ "table_size": size });
            }
        }
        if cluster["lb_policy"] != "RANDOM" && self.chance(4) {
            cluster["common_lb_config"] =
                json!({ "healthy_panic_threshold": { "value": self.pick(&[0.0, 50.0, 100.0]) } });
        }
    }

    /// Health checks reach the cluster's own endpoints: loopback backends only.
    fn health_check(&mut self) -> Value {
        // At least a second apart: with a hundred endpoints a shorter interval is a load
        // test of the debug build, not a configuration test.
        let interval = self.pick(&["1s", "5s", "9223372035s"]);
        let mut check = json!({
            "timeout": self.positive_duration(),
            "interval": interval,
            "unhealthy_threshold": self.pick(&[1, 3, u32::MAX]),
            "healthy_threshold": self.pick(&[1, 2, u32::MAX]),
        });
        if self.chance(2) {
            check["http_health_check"] = json!({ "path": if self.invalid() { "" } else { "/healthz" } });
        } else {
            check["tcp_health_check"] = json!({});
        }
        check
    }

    // === endpoints ===

    fn assignment(&mut self, name: &str) -> Value {
        if !self.breaking {
            // Its own resource (EDS), not a STATIC cluster's inline one.
            self.resource();
        }
        let localities: Vec<Value> = (0..self.rng.random_range(1..=3)).map(|_| self.locality()).collect();
        let mut assignment = json!({ "cluster_name": name, "endpoints": localities });
        if self.chance(5) {
            let factor = if self.invalid() { 0 } else { self.pick(&[1, 140, u32::MAX]) };
            assignment["policy"] = json!({ "overprovisioning_factor": factor });
        }
        assignment
    }

    fn locality(&mut self) -> Value {
        let count = if self.chance(10) { 100 } else { self.rng.random_range(1..=4) };
        let endpoints: Vec<Value> = (0..count)
            .map(|_| {
                let port = self.backend();
                let mut endpoint = json!({ "endpoint": { "address": self.socket(port) } });
                if self.chance(2) {
                    endpoint["load_balancing_weight"] = json!(self.weight());
                }
                if self.chance(8) {
                    endpoint["health_status"] = json!(self.pick(&["HEALTHY", "UNHEALTHY", "DRAINING", "DEGRADED"]));
                }
                endpoint
            })
            .collect();
        let priority = if self.invalid() { 129 } else { self.pick(&[0, 0, 0, 1, 2, 128]) };
        let mut locality = json!({ "priority": priority, "lb_endpoints": endpoints });
        if self.chance(2) {
            locality["locality"] = json!({ "zone": self.pick(&["z1", "z2"]) });
            locality["load_balancing_weight"] = json!(self.weight());
        }
        locality
    }

    // === routes ===

    fn route_config(&mut self, name: &str) -> Value {
        if !self.breaking {
            self.resource();
        }
        let hosts: Vec<Value> = (0..self.rng.random_range(1..=3)).map(|i| self.virtual_host(i)).collect();
        json!({ "name": name, "virtual_hosts": hosts })
    }

    fn virtual_host(&mut self, index: usize) -> Value {
        let domains: Vec<&str> = if self.chance(3) {
            vec!["*"]
        } else {
            // Drawn independently: two virtual hosts with one domain is a NACK.
            let pool = ["example.com", "*.example.com", "example.*", "example.com:8080", "other.test"];
            let mut d: Vec<&str> = pool.iter().copied().filter(|_| self.chance(3)).collect();
            if d.is_empty() {
                d.push(self.pick(&pool));
            }
            d
        };
        let routes: Vec<Value> = (0..self.rng.random_range(1..=4)).map(|_| self.route()).collect();
        let mut host = json!({ "name": format!("vh{index}"), "domains": domains, "routes": routes });
        if self.chance(5) {
            host["retry_policy"] = self.retry_policy();
        }
        host
    }

    fn route(&mut self) -> Value {
        let mut matcher = match self.rng.random_range(0..4) {
            0 => json!({ "prefix": self.pick(&["/", "/a", ""]) }),
            1 => json!({ "path": self.pick(&["/exact", "/a/b"]) }),
            2 => json!({ "safe_regex": { "regex": if self.invalid() { "(" } else { "/r[0-9]+" } } }),
            _ => json!({ "prefix": "/" }),
        };
        if self.chance(4) {
            matcher["case_sensitive"] = json!(false);
        }
        if self.chance(4) {
            matcher["headers"] = json!([self.pick(&[
                json!({ "name": "x-fuzz", "string_match": { "exact": "1" } }),
                json!({ "name": "x-fuzz", "present_match": true }),
                json!({ "name": "x-fuzz", "present_match": true, "invert_match": true }),
                json!({ "name": ":method", "string_match": { "exact": "GET" } }),
            ])]);
        }
        let mut route = json!({ "match": matcher });
        match self.rng.random_range(0..8) {
            0 => {
                let response = if self.chance(2) {
                    json!({ "host_redirect": "redirect.test", "response_code": "FOUND" })
                } else {
                    json!({ "path_redirect": "/moved", "https_redirect": self.chance(2) })
                };
                route["redirect"] = response;
            }
            1 => {
                let status = if self.invalid() { 600 } else { self.pick(&[200, 204, 404, 503, 599]) };
                route["direct_response"] = json!({ "status": status, "body": { "inline_string": "direct" } });
            }
            _ => route["route"] = self.route_action(),
        }
        route
    }

    fn route_action(&mut self) -> Value {
        let mut action = if self.chance(3) {
            // Weights sum to at most u32::MAX unless breaking: one may be the extreme.
            let count = self.rng.random_range(1..=3);
            let extreme = if self.invalid() { count } else { 1 };
            let clusters: Vec<Value> = (0..count)
                .map(|i| {
                    let weight =
                        if i < extreme && self.chance(3) { u32::MAX - 100 } else { self.pick(&[0, 1, 1, 50, 50]) };
                    json!({ "name": self.pick(&CLUSTERS), "weight": weight })
                })
                .collect();
            json!({ "weighted_clusters": { "clusters": clusters } })
        } else {
            json!({ "cluster": self.pick(&CLUSTERS) })
        };
        if self.chance(2) {
            action["timeout"] = self.duration_or_zero();
        }
        if self.chance(4) {
            action["idle_timeout"] = self.duration_or_zero();
        }
        if self.chance(3) {
            action["retry_policy"] = self.retry_policy();
        }
        if self.chance(5) {
            action["prefix_rewrite"] = json!("/rewritten");
        }
        if self.chance(5) {
            action["hash_policy"] = json!([{ "header": { "header_name": "x-fuzz" } }]);
        }
        action
    }

    fn retry_policy(&mut self) -> Value {
        let mut policy = json!({
            "retry_on": self.pick(&["5xx", "connect-failure,reset", "gateway-error,refused-stream", "retriable-4xx"]),
            "num_retries": self.count(),
        });
        if self.chance(2) {
            policy["per_try_timeout"] = self.duration_or_zero();
        }
        if self.chance(2) {
            let (base, max) = self.ordered_durations();
            policy["retry_back_off"] = json!({ "base_interval": base, "max_interval": max });
        }
        policy
    }

    // === listeners ===

    fn listener(&mut self, name: &str) -> Value {
        self.resource();
        // Each listener mostly keeps its own port; sometimes it moves to another's.
        let index = LISTENERS.iter().position(|n| *n == name).unwrap_or(0);
        let port = if self.chance(6) {
            let ports = self.listener_ports.clone();
            self.pick(&ports)
        } else {
            self.listener_ports[index % self.listener_ports.len()]
        };
        let filter = if self.chance(4) { self.tcp_proxy() } else { self.connection_manager() };
        let mut listener =
            json!({ "name": name, "address": self.socket(port), "filter_chains": [{ "filters": [filter] }] });
        if self.invalid() {
            listener["filter_chains"] = json!([]);
        }
        if self.chance(5) {
            listener["per_connection_buffer_limit_bytes"] = json!(self.pick(&[1, 1024, u32::MAX]));
        }
        listener
    }

    fn tcp_proxy(&mut self) -> Value {
        let mut proxy =
            json!({ "@type": format!("{TYPE}.filters.network.tcp_proxy.v3.TcpProxy"), "stat_prefix": "tcp" });
        if self.chance(4) {
            let clusters: Vec<Value> = (0..2)
                .map(|_| json!({ "name": self.pick(&CLUSTERS), "weight": if self.invalid() { 0 } else { self.weight() } }))
                .collect();
            proxy["weighted_clusters"] = json!({ "clusters": clusters });
        } else {
            proxy["cluster"] = json!(self.pick(&CLUSTERS));
        }
        if self.chance(3) {
            proxy["idle_timeout"] = self.duration_or_zero();
        }
        json!({ "name": "envoy.filters.network.tcp_proxy", "typed_config": proxy })
    }

    fn connection_manager(&mut self) -> Value {
        let mut hcm = json!({
            "@type": format!("{TYPE}.filters.network.http_connection_manager.v3.HttpConnectionManager"),
            "stat_prefix": "fuzz",
            "codec_type": self.pick(&["AUTO", "AUTO", "HTTP1", "HTTP2"]),
        });
        if self.chance(2) {
            let route = self.pick(&ROUTES);
            hcm["route_config"] = self.route_config(route);
        } else {
            hcm["rds"] = json!({
                "route_config_name": self.pick(&ROUTES),
                "config_source": { "ads": {}, "resource_api_version": "V3" },
            });
        }
        let mut filters: Vec<Value> = Vec::new();
        for _ in 0..self.rng.random_range(0..=3) {
            filters.push(self.http_filter());
        }
        let router = json!({ "name": "envoy.filters.http.router", "typed_config": {
            "@type": format!("{TYPE}.filters.http.router.v3.Router") } });
        if self.invalid() {
            filters.insert(0, router); // the router must be last
        } else {
            filters.push(router);
        }
        hcm["http_filters"] = json!(filters);
        if self.chance(3) {
            hcm["stream_idle_timeout"] = self.duration_or_zero();
        }
        if self.chance(4) {
            hcm["request_timeout"] = self.duration_or_zero();
        }
        if self.chance(4) {
            hcm["common_http_protocol_options"] = json!({ "idle_timeout": self.duration_or_zero() });
        }
        if self.chance(4) {
            let kb = if self.invalid() { 8193 } else { self.pick(&[1, 60, 8192]) };
            hcm["max_request_headers_kb"] = json!(kb);
        }
        if self.chance(4) {
            hcm["http2_protocol_options"] = json!({
                "max_concurrent_streams": self.pick(&[1, 100, 2_147_483_647]),
                "initial_stream_window_size": self.pick(&[65_535, 2_147_483_647]),
                "initial_connection_window_size": self.pick(&[65_535, 2_147_483_647]),
            });
        }
        json!({ "name": "envoy.filters.network.http_connection_manager", "typed_config": hcm })
    }

    fn http_filter(&mut self) -> Value {
        let percent = |n: u32| json!({ "numerator": n, "denominator": "HUNDRED" });
        let (name, config) = match self.rng.random_range(0..6) {
            0 => {
                // Short delays only: a long one holds requests by design.
                let delay = self.pick(&["0.001s", "0.05s"]);
                let fault = json!({
                    "@type": format!("{TYPE}.filters.http.fault.v3.HTTPFault"),
                    "abort": { "http_status": self.pick(&[503, 429]), "percentage": percent(self.pick(&[0, 10, 100])) },
                    "delay": { "fixed_delay": delay, "percentage": percent(self.pick(&[0, 50])) },
                });
                ("envoy.filters.http.fault", fault)
            }
            1 => {
                let interval = if self.invalid() { "0.01s" } else { self.pick(&["0.05s", "1s", "9223372035s"]) };
                let max_tokens = if self.invalid() { 0 } else { self.pick(&[1, 100, u32::MAX]) };
                let limit = json!({
                    "@type": format!("{TYPE}.filters.http.local_ratelimit.v3.LocalRateLimit"),
                    "stat_prefix": "lrl",
                    "token_bucket": { "max_tokens": max_tokens, "tokens_per_fill": self.pick(&[1, u32::MAX]), "fill_interval": interval },
                    "filter_enabled": { "runtime_key": "lrl_enabled", "default_value": percent(100) },
                    "filter_enforced": { "runtime_key": "lrl_enforced", "default_value": percent(self.pick(&[0, 100])) },
                });
                ("envoy.filters.http.local_ratelimit", limit)
            }
            2 => ("envoy.filters.http.cors", json!({ "@type": format!("{TYPE}.filters.http.cors.v3.Cors") })),
            3 => {
                let rbac = json!({
                    "@type": format!("{TYPE}.filters.http.rbac.v3.RBAC"),
                    "rules": { "action": self.pick(&["ALLOW", "DENY"]), "policies": { "any": {
                        "permissions": [{ "header": { "name": "x-fuzz", "present_match": true } }],
                        "principals": [{ "any": true }],
                    } } },
                });
                ("envoy.filters.http.rbac", rbac)
            }
            4 => {
                let check = json!({
                    "@type": format!("{TYPE}.filters.http.health_check.v3.HealthCheck"),
                    "pass_through_mode": false,
                    "headers": [{ "name": ":path", "string_match": { "exact": "/healthz" } }],
                });
                ("envoy.filters.http.health_check", check)
            }
            _ => {
                let compressor = json!({
                    "@type": format!("{TYPE}.filters.http.compressor.v3.Compressor"),
                    "compressor_library": { "name": "gzip", "typed_config": {
                        "@type": format!("{TYPE}.compression.gzip.compressor.v3.Gzip") } },
                });
                ("envoy.filters.http.compressor", compressor)
            }
        };
        json!({ "name": name, "typed_config": config })
    }
}

/// A known-good STATIC cluster with one endpoint on `port`.
pub fn static_cluster(name: &str, port: u16) -> Value {
    json!({
        "name": name, "type": "STATIC", "connect_timeout": "1s",
        "load_assignment": { "cluster_name": name, "endpoints": [{ "lb_endpoints": [{ "endpoint": { "address": {
            "socket_address": { "address": "127.0.0.1", "port_value": port } } } }] }] },
    })
}

/// A known-good listener on `port` routing everything to `cluster` with an inline route.
pub fn inline_listener(name: &str, port: u16, cluster: &str) -> Value {
    json!({
        "name": name,
        "address": { "socket_address": { "address": "127.0.0.1", "port_value": port } },
        "filter_chains": [{ "filters": [{ "name": "envoy.filters.network.http_connection_manager", "typed_config": {
            "@type": format!("{TYPE}.filters.network.http_connection_manager.v3.HttpConnectionManager"),
            "stat_prefix": name,
            "route_config": { "name": name, "virtual_hosts": [{ "name": "all", "domains": ["*"],
                "routes": [{ "match": { "prefix": "/" }, "route": { "cluster": cluster } }] }] },
            "http_filters": [{ "name": "envoy.filters.http.router", "typed_config": {
                "@type": format!("{TYPE}.filters.http.router.v3.Router") } }],
        } }] }],
    })
}
