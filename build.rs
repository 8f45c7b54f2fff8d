//! Compiles Outrider's own protos (ORCA, the echo service, Istio's filter configs) with a vendored protoc, and
//! writes the Envoy descriptor set shipped inside the `envoy-types` crate, without its
//! comments, into OUT_DIR so the bootstrap loader and `/config_dump` can speak Envoy's
//! protobuf JSON.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut prost_config = prost_build::Config::new();
    prost_config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    let well_known = protoc_bin_vendored::include_path()?;

    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    let own_descriptors = out.join("own_descriptors.bin");
    tonic_prost_build::configure()
        .file_descriptor_set_path(&own_descriptors)
        .compile_well_known_types(true)
        .extern_path(".google.protobuf", "::envoy_types::pb::google::protobuf")
        .compile_with_config(
            prost_config,
            &[
                PathBuf::from("proto/xds/data/orca/v3/orca_load_report.proto"),
                PathBuf::from("proto/xds/service/orca/v3/orca.proto"),
                PathBuf::from("proto/outrider/echo/v1/echo.proto"),
                PathBuf::from("proto/istio/alpn.proto"),
                PathBuf::from("proto/istio/ca.proto"),
                PathBuf::from("proto/istio/stats.proto"),
                PathBuf::from("proto/istio/peer_metadata.proto"),
                PathBuf::from("proto/istio/metadata_exchange.proto"),
                PathBuf::from("proto/istio/nds.proto"),
                PathBuf::from("proto/istio/workload.proto"),
                PathBuf::from("proto/envoy_contrib/peak_ewma.proto"),
                PathBuf::from("proto/envoy_contrib/peak_ewma_filter.proto"),
            ],
            &[PathBuf::from("proto"), well_known],
        )?;
    println!("cargo:rerun-if-changed=proto");

    let descriptors = envoy_types_descriptors()?;
    // Comments (source code info) are 80 % of the set and, decoded, tens of megabytes of
    // resident memory; the JSON mapping needs none of them.
    let mut set = <prost_types::FileDescriptorSet as prost::Message>::decode(std::fs::read(&descriptors)?.as_slice())?;
    for file in &mut set.file {
        file.source_code_info = None;
    }
    add_typed_structs(&mut set);
    add_ip_matcher(&mut set);
    add_own_extension_configs(&mut set, &own_descriptors)?;
    std::fs::write(out.join("envoy_descriptors.bin"), prost::Message::encode_to_vec(&set))?;
    let raw = std::fs::read(&descriptors)?;
    let resources = closure(&raw, |name| RESOURCE_ROOTS.contains(&name))?;
    std::fs::write(out.join("xds_resource_descriptors.bin"), resources)?;
    let extensions = closure(&raw, extension_root)?;
    std::fs::write(out.join("xds_extension_descriptors.bin"), extensions)?;
    println!("cargo:rerun-if-changed={}", descriptors.display());
    Ok(())
}

/// The files that define the five xDS resource types: with what they import, what the
/// protoc-gen-validate check of a response needs (it stops at `Any`, so no extension's
/// files), a small part of the whole set, so decoding it per response stays cheap.
const RESOURCE_ROOTS: [&str; 5] = [
    "envoy/config/listener/v3/listener.proto",
    "envoy/config/cluster/v3/cluster.proto",
    "envoy/config/route/v3/route.proto",
    "envoy/config/endpoint/v3/endpoint.proto",
    "envoy/extensions/transport_sockets/tls/v3/secret.proto",
];

/// The files of the messages a `typed_config` may hold: every extension's config
/// (`envoy/extensions/**`) and the few extension configs still under `envoy/config/**`
/// (tracers, the v3 filters of the old layout). With what they import, what the check of
/// an unpacked `typed_config` needs (`config::convert::common::unpack`).
fn extension_root(name: &str) -> bool {
    name.starts_with("envoy/extensions/") || name.starts_with("envoy/config/trace/")
}

/// The closure of the files `root` names over their imports, in the set's order.
///
/// Written from the raw bytes of the set: prost's `FileDescriptorProto` would drop the
/// `(validate.rules)` options, which are extensions, unknown to it. Only the comments
/// (`source_code_info`, field 9 of a file) are removed.
fn closure(set: &[u8], root: impl Fn(&str) -> bool) -> Result<Vec<u8>, Box<dyn std::error::Error>> {
    let mut files = Vec::new(); // (name, dependencies, raw bytes without comments)
    for (number, file) in wire_fields(set)? {
        if number != 1 {
            continue;
        }
        let parsed = <prost_types::FileDescriptorProto as prost::Message>::decode(file)?;
        let mut raw = Vec::with_capacity(file.len());
        for (field, bytes) in wire_fields_raw(file)? {
            if field != 9 {
                raw.extend_from_slice(bytes);
            }
        }
        files.push((parsed.name().to_owned(), parsed.dependency.clone(), raw));
    }
    let index: std::collections::HashMap<&str, usize> =
        files.iter().enumerate().map(|(i, (name, _, _))| (name.as_str(), i)).collect();
    let mut wanted: Vec<String> = files.iter().map(|(name, _, _)| name.clone()).filter(|name| root(name)).collect();
    let mut keep = std::collections::BTreeSet::new(); // indices: the set's (dependency) order
    while let Some(name) = wanted.pop() {
        let i = *index.get(name.as_str()).ok_or_else(|| format!("descriptor set lacks {name}"))?;
        if keep.insert(i) {
            wanted.extend(files[i].1.iter().cloned());
        }
    }
    let mut out = Vec::new();
    for i in keep {
        let raw = &files[i].2;
        prost::encoding::encode_key(1, prost::encoding::WireType::LengthDelimited, &mut out);
        prost::encoding::encode_varint(raw.len() as u64, &mut out);
        out.extend_from_slice(raw);
    }
    Ok(out)
}

/// Fields of a message as (field number, bytes).
type Fields<'a> = Vec<(u32, &'a [u8])>;

/// The length-delimited top-level fields of a message: (field number, contents).
fn wire_fields(message: &[u8]) -> Result<Fields<'_>, Box<dyn std::error::Error>> {
    let mut fields = Vec::new();
    let mut rest = message;
    while !rest.is_empty() {
        let (number, wire_type) = prost::encoding::decode_key(&mut rest)?;
        if wire_type != prost::encoding::WireType::LengthDelimited {
            return Err(format!("field {number} of a descriptor set is not length-delimited").into());
        }
        let len = usize::try_from(prost::encoding::decode_varint(&mut rest)?)?;
        let (contents, tail) = rest.split_at_checked(len).ok_or("truncated descriptor set")?;
        fields.push((number, contents));
        rest = tail;
    }
    Ok(fields)
}

/// Every top-level field of a message: (field number, its bytes with key and all).
fn wire_fields_raw(message: &[u8]) -> Result<Fields<'_>, Box<dyn std::error::Error>> {
    use prost::encoding::WireType;
    let mut fields = Vec::new();
    let mut rest = message;
    while !rest.is_empty() {
        let start = rest;
        let (number, wire_type) = prost::encoding::decode_key(&mut rest)?;
        let len = match wire_type {
            WireType::Varint => {
                prost::encoding::decode_varint(&mut rest)?;
                0
            }
            WireType::SixtyFourBit => 8,
            WireType::ThirtyTwoBit => 4,
            WireType::LengthDelimited => usize::try_from(prost::encoding::decode_varint(&mut rest)?)?,
            _ => return Err(format!("field {number}: groups in a descriptor").into()),
        };
        let tail = rest.get(len..).ok_or("truncated descriptor")?;
        fields.push((number, &start[..start.len() - tail.len()]));
        rest = tail;
    }
    Ok(fields)
}

/// `udpa.type.v1.TypedStruct` and `xds.type.v3.TypedStruct` (an extension's config as a
/// `Struct`, with its real type in `type_url`; Istio wraps its own filters in them) are
/// not in the `envoy-types` set. Without them the JSON reader would drop every such
/// `typed_config`, and with it the type Outrider needs to classify the filter. Both are two
/// fields: `string type_url = 1; google.protobuf.Struct value = 2;`.
fn add_typed_structs(set: &mut prost_types::FileDescriptorSet) {
    use prost_types::field_descriptor_proto::{Label, Type};
    use prost_types::{DescriptorProto, FieldDescriptorProto, FileDescriptorProto};
    for (file, package) in
        [("udpa/type/v1/typed_struct.proto", "udpa.type.v1"), ("xds/type/v3/typed_struct.proto", "xds.type.v3")]
    {
        let known =
            set.file.iter().any(|f| f.package() == package && f.message_type.iter().any(|m| m.name() == "TypedStruct"));
        if known {
            continue;
        }
        let field = |name: &str, number: i32, kind: Type, type_name: Option<&str>| FieldDescriptorProto {
            name: Some(name.into()),
            number: Some(number),
            label: Some(Label::Optional as i32),
            r#type: Some(kind as i32),
            type_name: type_name.map(Into::into),
            json_name: Some(lower_camel(name)),
            ..Default::default()
        };
        set.file.push(FileDescriptorProto {
            name: Some(file.into()),
            package: Some(package.into()),
            dependency: vec!["google/protobuf/struct.proto".into()],
            message_type: vec![DescriptorProto {
                name: Some("TypedStruct".into()),
                field: vec![
                    field("type_url", 1, Type::String, None),
                    field("value", 2, Type::Message, Some(".google.protobuf.Struct")),
                ],
                ..Default::default()
            }],
            syntax: Some("proto3".into()),
            ..Default::default()
        });
    }
}

/// protobuf's JSON name of a field: `type_url` is `typeUrl`.
fn lower_camel(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut upper = false;
    for c in name.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

/// `xds.type.matcher.v3.IPMatcher` (Istio's waypoints and ambient listeners match filter
/// chains by destination address with it) is not in the `envoy-types` set either: without
/// it the JSON reader drops a bootstrap's IP matcher. Declared here as xds declares it:
/// `IPMatcher { repeated IPRangeMatcher range_matchers = 1; }`,
/// `IPRangeMatcher { repeated xds.core.v3.CidrRange ranges = 1; Matcher.OnMatch on_match = 2;
/// bool exclusive = 3; }`.
fn add_ip_matcher(set: &mut prost_types::FileDescriptorSet) {
    use prost_types::field_descriptor_proto::{Label, Type};
    use prost_types::{DescriptorProto, FieldDescriptorProto, FileDescriptorProto};
    let package = "xds.type.matcher.v3";
    if set.file.iter().any(|f| f.package() == package && f.message_type.iter().any(|m| m.name() == "IPMatcher")) {
        return;
    }
    let field = |name: &str, number: i32, label: Label, kind: Type, type_name: Option<&str>| FieldDescriptorProto {
        name: Some(name.into()),
        number: Some(number),
        label: Some(label as i32),
        r#type: Some(kind as i32),
        type_name: type_name.map(Into::into),
        json_name: Some(lower_camel(name)),
        ..Default::default()
    };
    let file_of = |package: &str, message: &str| {
        let declares =
            |f: &&FileDescriptorProto| f.package() == package && f.message_type.iter().any(|m| m.name() == message);
        set.file.iter().find(declares).map(|f| f.name().to_owned())
    };
    let dependency: Vec<String> =
        [file_of("xds.core.v3", "CidrRange"), file_of(package, "Matcher")].into_iter().flatten().collect();
    let range = DescriptorProto {
        name: Some("IPRangeMatcher".into()),
        field: vec![
            field("ranges", 1, Label::Repeated, Type::Message, Some(".xds.core.v3.CidrRange")),
            field("on_match", 2, Label::Optional, Type::Message, Some(".xds.type.matcher.v3.Matcher.OnMatch")),
            field("exclusive", 3, Label::Optional, Type::Bool, None),
        ],
        ..Default::default()
    };
    set.file.push(FileDescriptorProto {
        name: Some("xds/type/matcher/v3/ip.proto".into()),
        package: Some(package.into()),
        dependency,
        message_type: vec![DescriptorProto {
            name: Some("IPMatcher".into()),
            field: vec![field(
                "range_matchers",
                1,
                Label::Repeated,
                Type::Message,
                Some(".xds.type.matcher.v3.IPMatcher.IPRangeMatcher"),
            )],
            nested_type: vec![range],
            ..Default::default()
        }],
        syntax: Some("proto3".into()),
        ..Default::default()
    });
}

/// Istio's filter configs (`istio.alpn`, `istio.stats`, peer metadata exchange) and Envoy's
/// contrib peak-EWMA policy config, so
/// `/config_dump` can show the listeners that carry them and their JSON can be read.
fn add_own_extension_configs(
    set: &mut prost_types::FileDescriptorSet,
    own: &Path,
) -> Result<(), Box<dyn std::error::Error>> {
    let own = <prost_types::FileDescriptorSet as prost::Message>::decode(std::fs::read(own)?.as_slice())?;
    for mut file in own.file {
        if file.name().starts_with("istio/") || file.name().starts_with("envoy_contrib/") {
            file.source_code_info = None;
            set.file.push(file);
        }
    }
    Ok(())
}

/// Finds `src/generated/types.bin` of the resolved `envoy-types` package through
/// `cargo metadata`, which knows where every dependency's sources are (registry, vendor
/// directory or git checkout).
fn envoy_types_descriptors() -> Result<PathBuf, Box<dyn std::error::Error>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR")?;
    let target = std::env::var("TARGET")?;
    let metadata = |offline: bool| {
        let mut command = Command::new(&cargo);
        command
            .args(["metadata", "--format-version", "1", "--filter-platform", &target])
            .arg("--manifest-path")
            .arg(Path::new(&manifest_dir).join("Cargo.toml"));
        if offline {
            command.arg("--offline");
        }
        command.output()
    };
    // Offline first; dev-dependencies may not be downloaded yet on a plain `cargo build`,
    // and then cargo metadata needs the registry once.
    let mut output = metadata(true)?;
    if !output.status.success() {
        output = metadata(false)?;
    }
    if !output.status.success() {
        return Err(format!("cargo metadata failed: {}", String::from_utf8_lossy(&output.stderr)).into());
    }
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout)?;
    let packages = metadata["packages"].as_array().ok_or("cargo metadata: no packages")?;
    for package in packages {
        if package["name"] == "envoy-types" {
            let manifest = package["manifest_path"].as_str().ok_or("envoy-types: no manifest_path")?;
            let dir = Path::new(manifest).parent().ok_or("envoy-types: bad manifest_path")?;
            let bin = dir.join("src/generated/types.bin");
            if bin.exists() {
                return Ok(bin);
            }
            return Err(format!("{} is missing", bin.display()).into());
        }
    }
    Err("envoy-types not found in cargo metadata".into())
}
