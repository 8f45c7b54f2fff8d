//! Dynamic metadata between its protobuf form (`google.protobuf.Struct`, what the
//! authorization service speaks) and the JSON form requests carry.

use crate::pb::google::protobuf::{ListValue, Struct, Value, value::Kind};

pub fn json_to_struct(fields: &serde_json::Map<String, serde_json::Value>) -> Struct {
    Struct { fields: fields.iter().map(|(k, v)| (k.clone(), json_to_value(v))).collect() }
}

fn json_to_value(value: &serde_json::Value) -> Value {
    let kind = match value {
        serde_json::Value::Null => Kind::NullValue(0),
        serde_json::Value::Bool(b) => Kind::BoolValue(*b),
        serde_json::Value::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or_default()),
        serde_json::Value::String(s) => Kind::StringValue(s.clone()),
        serde_json::Value::Array(a) => Kind::ListValue(ListValue { values: a.iter().map(json_to_value).collect() }),
        serde_json::Value::Object(o) => Kind::StructValue(json_to_struct(o)),
    };
    Value { kind: Some(kind) }
}

pub fn struct_to_json(proto: &Struct) -> serde_json::Map<String, serde_json::Value> {
    proto.fields.iter().map(|(k, v)| (k.clone(), value_to_json(v))).collect()
}

fn value_to_json(value: &Value) -> serde_json::Value {
    match &value.kind {
        None | Some(Kind::NullValue(_)) => serde_json::Value::Null,
        Some(Kind::BoolValue(b)) => serde_json::Value::Bool(*b),
        Some(Kind::NumberValue(n)) => serde_json::Number::from_f64(*n).map_or(serde_json::Value::Null, Into::into),
        Some(Kind::StringValue(s)) => serde_json::Value::String(s.clone()),
        Some(Kind::ListValue(l)) => serde_json::Value::Array(l.values.iter().map(value_to_json).collect()),
        Some(Kind::StructValue(s)) => serde_json::Value::Object(struct_to_json(s)),
    }
}
