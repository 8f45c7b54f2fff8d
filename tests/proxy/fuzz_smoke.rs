//! The fuzz targets' bodies (`fuzz/src/lib.rs`) on stable, deterministically: each gets
//! its seed corpus (`fuzz/corpus/<target>/`) and a few thousand seeded mutations of it
//! (truncations, bit flips, byte overwrites, insertions, splices). None may panic.
//! Longer, coverage-guided runs are cargo-fuzz's, in `bench/soak.sh`.

#[path = "../../fuzz/src/lib.rs"]
mod bodies;

use std::path::{Path, PathBuf};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Mutated inputs per target.
const MUTATIONS: usize = 4000;

fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus").join(target)
}

/// The seed files of `target`, in name order.
fn seeds(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = corpus_dir(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.is_file() && path.file_name().is_some_and(|n| n != "README.md"))
        .collect();
    files.sort();
    files.into_iter().map(|path| (path.display().to_string(), std::fs::read(&path).unwrap())).collect()
}

/// One random change of `input`, the kinds libFuzzer's mutator makes most.
fn mutate(rng: &mut SmallRng, input: &mut Vec<u8>, other: &[u8]) {
    let at = |rng: &mut SmallRng, len: usize| rng.random_range(0..len.max(1));
    match rng.random_range(0..6) {
        0 => input.truncate(at(rng, input.len())),
        1 if !input.is_empty() => {
            let i = at(rng, input.len());
            input[i] ^= 1 << rng.random_range(0..8);
        }
        2 if !input.is_empty() => {
            // Bytes that are interesting to parsers: limits, separators, varint continuations.
            const SPECIAL: [u8; 10] = [0, 0xff, 0x7f, 0x80, b'\n', b':', b',', b'{', b'%', b'"'];
            let i = at(rng, input.len());
            input[i] = if rng.random_bool(0.5) { SPECIAL[rng.random_range(0..SPECIAL.len())] } else { rng.random() };
        }
        3 => {
            let i = at(rng, input.len() + 1).min(input.len());
            let bytes: Vec<u8> = (0..rng.random_range(1..8)).map(|_| rng.random()).collect();
            input.splice(i..i, bytes);
        }
        4 if !other.is_empty() => {
            // Splice: a head of this input, a tail of another.
            let (i, j) = (at(rng, input.len()).min(input.len()), at(rng, other.len()));
            input.truncate(i);
            input.extend_from_slice(&other[j..]);
        }
        _ => {
            // Duplicate a slice in place (repeated fields, nested messages).
            if !input.is_empty() {
                let start = at(rng, input.len());
                let end = (start + rng.random_range(1..64)).min(input.len());
                let copy = input[start..end].to_vec();
                input.splice(end..end, copy);
            }
        }
    }
}

fn smoke(target: &str) {
    let body = bodies::TARGETS.iter().find(|(name, _)| *name == target).unwrap().1;
    let seeds = seeds(target);
    assert!(!seeds.is_empty(), "no seeds for {target}");
    for (_, seed) in &seeds {
        body(seed);
    }
    let mut rng = SmallRng::seed_from_u64(0x5eed_0000 + target.len() as u64);
    for _ in 0..MUTATIONS {
        let mut input = seeds[rng.random_range(0..seeds.len())].1.clone();
        let other = &seeds[rng.random_range(0..seeds.len())].1;
        for _ in 0..rng.random_range(1..5) {
            mutate(&mut rng, &mut input, other);
        }
        body(&input);
    }
}

#[test]
fn every_target_has_a_smoke_test() {
    let names: Vec<_> = bodies::TARGETS.iter().map(|(name, _)| *name).collect();
    assert_eq!(names, ["xds_convert", "orca", "bootstrap", "http_headers"]);
}

#[test]
fn xds_convert_survives_mutations() {
    smoke("xds_convert");
}

#[test]
fn orca_survives_mutations() {
    smoke("orca");
}

#[test]
fn bootstrap_survives_mutations() {
    smoke("bootstrap");
}

#[test]
fn http_headers_survives_mutations() {
    smoke("http_headers");
}

/// Seeds that Outrider refuses on purpose, with the field that makes it refuse them: each
/// carries a feature that would change what requests get and that Outrider does not
/// implement, so it is NACKed with that path rather than skipped.
/// (None today; the list keeps the rule that such a refusal names its field.)
const REFUSED_SEEDS: &[(&str, &str)] = &[];

/// The xDS seeds are real resources: each converts as its own type, or is refused for
/// the reason [`REFUSED_SEEDS`] gives, with the field path.
#[test]
fn xds_seeds_are_accepted_resources() {
    use outrider::config::{ResourceType, Warnings, convert::decode_resource};
    for (path, bytes) in seeds("xds_convert") {
        let file = path.rsplit('/').next().unwrap();
        let prefix = file.split('-').next().unwrap();
        let resource_type = ResourceType::ALL.into_iter().find(|t| t.short_name() == prefix).unwrap();
        let result = decode_resource(resource_type, &bytes, &mut Warnings::new());
        match REFUSED_SEEDS.iter().find(|(name, _)| *name == file) {
            None => drop(result.unwrap_or_else(|e| panic!("{path}: {e}"))),
            Some((_, why)) => {
                let error = result.err().unwrap_or_else(|| panic!("{path}: expected to be refused ({why})"));
                let field = why.rsplit(' ').next().unwrap();
                assert!(error.path().ends_with(field), "{path}: refused at {}, expected {why}", error.path());
            }
        }
    }
}

/// Writes the xDS seed corpus: resources of each type taken from Istio's config dumps in
/// `tests/data/istio`, as protobuf bytes (what the ADS client receives). Run it by hand
/// when those files change:
/// `cargo nextest run --test proxy --run-ignored only -E 'test(fuzz_smoke::write_xds_seeds)'`.
#[test]
#[ignore = "writes fuzz/corpus/xds_convert"]
fn write_xds_seeds() {
    use outrider::config::ResourceType;
    use outrider::pb::envoy::config::{cluster::v3::Cluster, endpoint::v3::ClusterLoadAssignment};
    use outrider::pb::envoy::config::{listener::v3::Listener, route::v3::RouteConfiguration};
    use outrider::pb::envoy::extensions::transport_sockets::tls::v3::Secret;
    use serde_json::Value;

    /// Every JSON object in `value` whose `@type` is `type_url`.
    fn typed<'a>(value: &'a Value, type_url: &str, found: &mut Vec<&'a Value>) {
        match value {
            Value::Object(map) if map.get("@type").and_then(Value::as_str) == Some(type_url) => found.push(value),
            Value::Object(map) => map.values().for_each(|v| typed(v, type_url, found)),
            Value::Array(items) => items.iter().for_each(|v| typed(v, type_url, found)),
            _ => {}
        }
    }
    fn encode<M: prost::Message + Default>(full_name: &str, value: &Value) -> Option<Vec<u8>> {
        outrider::pb::json::from_value::<M>(full_name, value.clone()).ok().map(|(m, _)| m.encode_to_vec())
    }

    /// Seeds per type: a few that convert, from the smallest to the largest.
    const PER_TYPE: usize = 4;
    let dir = corpus_dir("xds_convert");
    std::fs::create_dir_all(&dir).unwrap();
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/istio");
    let dumps: Vec<Value> = ["waypoint-full.config_dump.json", "sidecar-endpoints.config_dump.json"]
        .iter()
        .chain(["sidecar-listeners.config_dump.json"].iter())
        .map(|f| serde_json::from_str(&std::fs::read_to_string(data.join(f)).unwrap()).unwrap())
        .collect();
    for resource_type in ResourceType::ALL {
        let full_name = resource_type.type_url().rsplit('/').next().unwrap();
        let mut found = Vec::new();
        dumps.iter().for_each(|dump| typed(dump, resource_type.type_url(), &mut found));
        let mut encoded: Vec<Vec<u8>> = found
            .into_iter()
            .filter_map(|value| match resource_type {
                ResourceType::Cluster => encode::<Cluster>(full_name, value),
                ResourceType::ClusterLoadAssignment => encode::<ClusterLoadAssignment>(full_name, value),
                ResourceType::Listener => encode::<Listener>(full_name, value),
                ResourceType::RouteConfiguration => encode::<RouteConfiguration>(full_name, value),
                ResourceType::Secret => encode::<Secret>(full_name, value),
            })
            .filter(|bytes| {
                let mut warnings = outrider::config::Warnings::new();
                outrider::config::convert::decode_resource(resource_type, bytes, &mut warnings).is_ok()
            })
            .collect();
        encoded.sort_by_key(|bytes| (bytes.len(), bytes.clone()));
        encoded.dedup();
        let picked: Vec<&Vec<u8>> = if encoded.len() <= PER_TYPE {
            encoded.iter().collect()
        } else {
            (0..PER_TYPE).map(|i| &encoded[i * (encoded.len() - 1) / (PER_TYPE - 1)]).collect()
        };
        for (i, bytes) in picked.into_iter().enumerate() {
            std::fs::write(dir.join(format!("{}-{i}.pb", resource_type.short_name())), bytes).unwrap();
        }
    }
}

/// The HTTP seeds are requests the target routes, not inputs it throws away.
#[test]
fn http_seeds_are_request_heads() {
    for (path, bytes) in seeds("http_headers") {
        assert!(bodies::request_head(&bytes[1..]).is_some(), "{path}");
    }
}
