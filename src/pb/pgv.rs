//! The protoc-gen-validate (`validate.rules`) constraints of Envoy's xDS resources, checked
//! from the descriptors, as Envoy checks them while it decodes a response.
//!
//! Envoy's protos carry their constraints as options: `(validate.rules)` on fields (a
//! string's `min_len`, a number's `gte`, a message's `required`...), `(validate.required)`
//! on oneofs, `(validate.disabled)` and `(validate.ignored)` on messages. Envoy compiles them
//! into a `Validate()` per message and runs it on every resource as it is decoded, before
//! the listener, cluster or route manager sees it: one resource that breaks a constraint
//! fails the decoding of the whole response, which is NACKed with nothing of it applied.
//!
//! Here the same rules are read from the descriptor set of the five resource types (and
//! what they import) and checked over the resource decoded as a `DynamicMessage`. Like
//! Envoy's generated `Validate()`, the check goes into every nested message but not into
//! the contents of an `Any`: a `typed_config` is validated by the extension that reads it,
//! and a violation there rejects only that resource (see `config::convert`).
//!
//! The contents of an `Any` are checked where Outrider decodes them
//! (`config::convert::common::unpack`), as Envoy's factories do
//! (`MessageUtil::downcastAndValidate`), against a second descriptor set: that of every
//! extension's config. Each set is decoded when a check needs it (a few milliseconds, see
//! `tests` for the measure) and dropped afterwards, as `json::pool` is, so that an idle
//! proxy keeps none of it: [`with_extension_checks`] holds the extensions' validator for
//! the conversion of one response.

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, Weak};

use prost_reflect::{
    DescriptorPool, DynamicMessage, ExtensionDescriptor, FieldDescriptor, Kind, MessageDescriptor, OneofDescriptor,
    ReflectMessage, Value,
};

static RESOURCE_DESCRIPTORS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/xds_resource_descriptors.bin"));
static EXTENSION_DESCRIPTORS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/xds_extension_descriptors.bin"));

/// Which descriptor set a validator reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Set {
    /// The five xDS resource types and what they import.
    Resources,
    /// Every extension's config (`envoy/extensions/**`, the tracers) and what they import.
    Extensions,
}

/// A resource that breaks a constraint of its proto: where (field path) and which.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {reason}")]
pub struct Violation {
    pub path: String,
    pub reason: String,
}

static RESOURCES: Mutex<Weak<DescriptorPool>> = Mutex::new(Weak::new());
static EXTENSIONS: Mutex<Weak<DescriptorPool>> = Mutex::new(Weak::new());
#[cfg(test)]
static KEPT_FOR_TESTS: Mutex<Vec<Arc<DescriptorPool>>> = Mutex::new(Vec::new());

/// The descriptor pool of `set`, shared while any caller holds it.
fn pool(set: Set) -> Result<Arc<DescriptorPool>, Violation> {
    let (cache, bytes) = match set {
        Set::Resources => (&RESOURCES, RESOURCE_DESCRIPTORS),
        Set::Extensions => (&EXTENSIONS, EXTENSION_DESCRIPTORS),
    };
    let mut cached = cache.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(pool) = cached.upgrade() {
        return Ok(pool);
    }
    let pool = DescriptorPool::decode(bytes)
        .map(Arc::new)
        .map_err(|e| Violation { path: String::new(), reason: format!("descriptor set: {e}") })?;
    *cached = Arc::downgrade(&pool);
    // Unit tests convert configs piece by piece, outside any response: one decoding per
    // test process rather than one per typed config.
    #[cfg(test)]
    KEPT_FOR_TESTS.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).push(pool.clone());
    Ok(pool)
}

/// The extensions' descriptor pool, for a caller that converts configs outside any
/// response (the fuzz targets) and keeps it, so that each conversion does not decode it
/// again: the pool stays shared while anyone holds it.
pub fn extension_pool() -> Result<Arc<DescriptorPool>, Violation> {
    pool(Set::Extensions)
}

/// Checks resources against their protos' constraints; one per response, so that the
/// pool and the rules read from it are shared by all of the response's resources.
pub struct Validator {
    pool: Arc<DescriptorPool>,
    field_rules: ExtensionDescriptor,
    oneof_required: ExtensionDescriptor,
    message_disabled: ExtensionDescriptor,
    message_ignored: ExtensionDescriptor,
    /// What each message met so far asks: its fields with their `(validate.rules)`, its
    /// required oneofs; by its full name, shared so that a visit clones nothing.
    messages: HashMap<String, Arc<Plan>, foldhash::fast::RandomState>,
    patterns: HashMap<String, regex::Regex>,
    /// Extension configs this validator found valid, by message name and exact bytes:
    /// a response repeats many (every Istio cluster's `HttpProtocolOptions`), and a repeat
    /// is a look-up instead of a decode and walk. Compared in full, no hash stands in.
    valid_extensions: HashSet<(String, Box<[u8]>)>,
}

impl Validator {
    /// A validator of the xDS resource types.
    pub fn new() -> Result<Self, Violation> {
        Self::of(Set::Resources)
    }

    /// A validator of `set`'s messages.
    pub fn of(set: Set) -> Result<Self, Violation> {
        let pool = pool(set)?;
        let extension = |name: &str| {
            pool.get_extension_by_name(name)
                .ok_or_else(|| Violation { path: String::new(), reason: format!("descriptor set lacks {name}") })
        };
        Ok(Self {
            field_rules: extension("validate.rules")?,
            oneof_required: extension("validate.required")?,
            message_disabled: extension("validate.disabled")?,
            message_ignored: extension("validate.ignored")?,
            messages: HashMap::default(),
            patterns: HashMap::new(),
            valid_extensions: HashSet::new(),
            pool,
        })
    }

    /// Checks the protobuf `bytes` of the message `full_name` (e.g.
    /// `envoy.config.cluster.v3.Cluster`); the first violation found, by its field path.
    pub fn check(&mut self, full_name: &str, bytes: &[u8]) -> Result<(), Violation> {
        let desc = self
            .pool
            .get_message_by_name(full_name)
            .ok_or_else(|| Violation { path: String::new(), reason: format!("unknown message type {full_name}") })?;
        let message = DynamicMessage::decode(desc, bytes)
            .map_err(|e| Violation { path: String::new(), reason: format!("cannot decode: {e}") })?;
        let mut path = Path::default();
        self.message(&message, &mut path).map_err(|reason| Violation { path: path.to_string(), reason })
    }

    /// Checks an extension's config, `bytes` of the message `full_name`. Messages the set
    /// does not define are not Envoy's (wrappers, Istio's filter configs) and carry no
    /// rules; an Envoy message it lacks is refused rather than let through unchecked.
    pub fn check_extension(&mut self, full_name: &str, bytes: &[u8]) -> Result<(), Violation> {
        if self.pool.get_message_by_name(full_name).is_none() && !full_name.starts_with("envoy.") {
            return Ok(());
        }
        let key = (full_name.to_owned(), Box::<[u8]>::from(bytes));
        if self.valid_extensions.contains(&key) {
            return Ok(());
        }
        self.check(full_name, bytes)?;
        self.valid_extensions.insert(key);
        Ok(())
    }

    fn rules_of(&self, field: &FieldDescriptor) -> Option<Rules> {
        let options = field.options();
        if !options.has_extension(&self.field_rules) {
            return None;
        }
        match options.get_extension(&self.field_rules).as_ref() {
            Value::Message(m) => Some(Rules::read(m)),
            _ => None,
        }
    }

    fn plan_of(&mut self, desc: &MessageDescriptor) -> Arc<Plan> {
        if let Some(plan) = self.messages.get(desc.full_name()) {
            return plan.clone();
        }
        let options = desc.options();
        let plan = Arc::new(Plan {
            skip: flag(&options, &self.message_disabled) || flag(&options, &self.message_ignored),
            required_oneofs: desc
                .oneofs()
                .filter(|o| !o.is_synthetic() && flag(&o.options(), &self.oneof_required))
                .collect(),
            fields: desc
                .fields()
                .map(|field| FieldPlan {
                    rules: self.rules_of(&field),
                    in_oneof: field.containing_oneof().is_some(),
                    field,
                })
                .collect(),
        });
        self.messages.insert(desc.full_name().to_owned(), plan.clone());
        plan
    }

    fn message(&mut self, message: &DynamicMessage, path: &mut Path) -> Result<(), String> {
        let plan = self.plan_of(&message.descriptor());
        if plan.skip {
            return Ok(());
        }
        if let Some(oneof) = plan.required_oneofs.iter().find(|o| !oneof_set(message, o)) {
            path.push(Part::Oneof(oneof.name().to_owned()));
            return Err("value is required".into());
        }
        for FieldPlan { rules, field, in_oneof } in &plan.fields {
            let present = message.has_field(field);
            if !present && (rules.is_none() || *in_oneof) {
                // Nothing to check: an absent field without rules (an empty list or map, an
                // unset message, a proto3 scalar at its default) passes whatever it is, and
                // the rules of a oneof's member apply only to the member that is set.
                continue;
            }
            // The descriptor, not its name: a path is written out only for a violation.
            path.push(Part::Field(field.clone()));
            self.field(field, &message.get_field(field), present, rules.as_ref(), path)?;
            path.pop();
        }
        Ok(())
    }

    fn field(
        &mut self,
        field: &FieldDescriptor,
        value: &Value,
        present: bool,
        rules: Option<&Rules>,
        path: &mut Path,
    ) -> Result<(), String> {
        if field.is_map() {
            let Value::Map(entries) = value else { return Ok(()) };
            let map_rules = rules.and_then(|r| sub(r, "map"));
            if let Some(r) = &map_rules
                && !(flag_named(r, "ignore_empty") && entries.is_empty())
            {
                count(entries.len(), r, "min_pairs", "max_pairs", "pair")?;
            }
            let Kind::Message(entry) = field.kind() else { return Ok(()) };
            let (key_field, value_field) = (entry.map_entry_key_field(), entry.map_entry_value_field());
            let keys = map_rules.as_ref().and_then(|r| sub(r, "keys"));
            let values = map_rules.as_ref().and_then(|r| sub(r, "values"));
            let mut sorted: Vec<_> = entries.iter().collect();
            sorted.sort_by(|a, b| a.0.cmp(b.0));
            for (key, item) in sorted {
                path.push(Part::Key(match key {
                    prost_reflect::MapKey::String(s) => format!("{s:?}"),
                    other => format!("{:?}", Value::from(other.clone())),
                }));
                let key_value: Value = key.clone().into();
                self.single(&key_field, &key_value, true, keys, path)?;
                self.single(&value_field, item, true, values, path)?;
                path.pop();
            }
            return Ok(());
        }
        if field.is_list() {
            let Value::List(items) = value else { return Ok(()) };
            let list_rules = rules.and_then(|r| sub(r, "repeated"));
            if let Some(r) = &list_rules
                && !(flag_named(r, "ignore_empty") && items.is_empty())
            {
                count(items.len(), r, "min_items", "max_items", "item")?;
                if flag_named(r, "unique") && !unique(items) {
                    return Err("repeated value must contain unique items".into());
                }
            }
            let item_rules = list_rules.as_ref().and_then(|r| sub(r, "items"));
            for (index, item) in items.iter().enumerate() {
                path.push(Part::Index(index));
                self.single(field, item, true, item_rules, path)?;
                path.pop();
            }
            return Ok(());
        }
        // A singular field: proto3 scalars are always checked (their default is their
        // value), messages and explicit-presence scalars only when set.
        let present = present || !field.supports_presence();
        self.single(field, value, present, rules, path)
    }

    /// One value (a singular field, a list item, a map key or value) against `rules`.
    fn single(
        &mut self,
        field: &FieldDescriptor,
        value: &Value,
        present: bool,
        rules: Option<&Rules>,
        path: &mut Path,
    ) -> Result<(), String> {
        match field.kind() {
            Kind::Message(desc) => self.message_value(&desc, value, present, rules, path),
            Kind::Enum(enum_desc) => match (rules.and_then(|r| sub(r, "enum")), value) {
                (Some(r), Value::EnumNumber(number)) if present => {
                    if flag_named(r, "defined_only") && enum_desc.get_value(*number).is_none() {
                        return Err("value must be one of the defined enum values".into());
                    }
                    numeric(r, &Num::Int(i128::from(*number)), false)
                }
                _ => Ok(()),
            },
            _ if !present => Ok(()),
            _ => match rules {
                Some(r) => self.scalar(r, value),
                None => Ok(()),
            },
        }
    }

    fn message_value(
        &mut self,
        desc: &MessageDescriptor,
        value: &Value,
        present: bool,
        rules: Option<&Rules>,
        path: &mut Path,
    ) -> Result<(), String> {
        let full_name = desc.full_name();
        let required = |kind: &str| rules.and_then(|r| sub(r, kind)).is_some_and(|r| flag_named(r, "required"));
        if !present {
            let type_rule = match full_name {
                "google.protobuf.Duration" => "duration",
                "google.protobuf.Timestamp" => "timestamp",
                "google.protobuf.Any" => "any",
                _ => "message",
            };
            if required("message") || required(type_rule) {
                return Err("value is required".into());
            }
            return Ok(());
        }
        let Value::Message(message) = value else { return Ok(()) };
        if let Some(wrapped) = wrapper_rule(full_name) {
            // A wrapper's rules are those of the type it wraps, on its `value`.
            let inner = message.get_field_by_name("value");
            return match (rules.and_then(|r| sub(r, wrapped)), inner) {
                (Some(r), Some(inner)) => self.scalar_of(wrapped, r, &inner),
                _ => Ok(()),
            };
        }
        match full_name {
            "google.protobuf.Duration" | "google.protobuf.Timestamp" => {
                let kind = if full_name.ends_with("Duration") { "duration" } else { "timestamp" };
                match rules.and_then(|r| sub(r, kind)) {
                    Some(r) => time(r, nanos(message), kind == "timestamp"),
                    None => Ok(()),
                }
            }
            "google.protobuf.Any" => match rules.and_then(|r| sub(r, "any")) {
                Some(r) => {
                    let type_url = text_field(message, "type_url");
                    membership(r, &Value::String(type_url), "type URL")
                }
                None => Ok(()),
            },
            _ if full_name.starts_with("google.protobuf.") => Ok(()), // no rules inside
            _ => {
                if rules.and_then(|r| sub(r, "message")).is_some_and(|r| flag_named(r, "skip")) {
                    return Ok(());
                }
                self.message(message, path)
            }
        }
    }

    /// A scalar against the rules of its own type (`rules` is a `FieldRules`).
    fn scalar(&mut self, rules: &Rules, value: &Value) -> Result<(), String> {
        let Some((kind, typed)) = rules
            .0
            .iter()
            .find_map(|(name, rule)| rule.nested.as_ref().filter(|_| name != "message").map(|r| (name, r)))
        else {
            return Ok(());
        };
        self.scalar_of(kind, typed, value)
    }

    /// `value` against `rules`, the `<kind>Rules` message (`StringRules`, `UInt32Rules`...).
    fn scalar_of(&mut self, kind: &str, rules: &Rules, value: &Value) -> Result<(), String> {
        match (kind, value) {
            ("string", Value::String(s)) => self.string(rules, s),
            ("bytes", Value::Bytes(b)) => self.bytes(rules, b),
            ("bool", Value::Bool(b)) => match set(rules, "const") {
                Some(c) if c.as_ref() != &Value::Bool(*b) => Err(format!("value must equal {c:?}")),
                _ => Ok(()),
            },
            (_, Value::F32(f)) => numeric(rules, &Num::Float(f64::from(*f)), true),
            (_, Value::F64(f)) => numeric(rules, &Num::Float(*f), true),
            (_, Value::I32(i)) => numeric(rules, &Num::Int(i128::from(*i)), true),
            (_, Value::I64(i)) => numeric(rules, &Num::Int(i128::from(*i)), true),
            (_, Value::U32(i)) => numeric(rules, &Num::Int(i128::from(*i)), true),
            (_, Value::U64(i)) => numeric(rules, &Num::Int(i128::from(*i)), true),
            _ => Ok(()),
        }
    }

    fn string(&mut self, rules: &Rules, s: &str) -> Result<(), String> {
        if s.is_empty() && flag_named(rules, "ignore_empty") {
            return Ok(());
        }
        let chars = s.chars().count();
        lengths(rules, chars, ["len", "min_len", "max_len"], "characters")?;
        lengths(rules, s.len(), ["len_bytes", "min_bytes", "max_bytes"], "bytes")?;
        affixes(rules, s.as_bytes(), |v| match v {
            Value::String(t) => Some(t.as_bytes().to_vec()),
            _ => None,
        })?;
        if let Some(Value::String(needle)) = set(rules, "not_contains").as_deref()
            && s.contains(needle.as_str())
        {
            return Err(format!("value must not contain {needle:?}"));
        }
        membership(rules, &Value::String(s.to_owned()), "value")?;
        if let Some(Value::String(pattern)) = set(rules, "pattern").as_deref() {
            self.pattern(pattern, s)?;
        }
        well_known_string(rules, s)
    }

    fn bytes(&mut self, rules: &Rules, b: &[u8]) -> Result<(), String> {
        if b.is_empty() && flag_named(rules, "ignore_empty") {
            return Ok(());
        }
        lengths(rules, b.len(), ["len", "min_len", "max_len"], "bytes")?;
        affixes(rules, b, |v| match v {
            Value::Bytes(t) => Some(t.to_vec()),
            _ => None,
        })?;
        membership(rules, &Value::Bytes(b.to_vec().into()), "value")?;
        if let Some(Value::String(pattern)) = set(rules, "pattern").as_deref() {
            self.pattern(pattern, &String::from_utf8_lossy(b))?;
        }
        let ip = [("ip", b.len() == 4 || b.len() == 16), ("ipv4", b.len() == 4), ("ipv6", b.len() == 16)];
        match ip.iter().find(|(rule, ok)| flag_named(rules, rule) && !ok) {
            Some((rule, _)) => Err(format!("value must be a valid {rule} address in byte format")),
            None => Ok(()),
        }
    }

    fn pattern(&mut self, pattern: &str, s: &str) -> Result<(), String> {
        if !self.patterns.contains_key(pattern) {
            let compiled = regex::Regex::new(pattern).map_err(|e| format!("pattern {pattern:?}: {e}"))?;
            self.patterns.insert(pattern.to_owned(), compiled);
        }
        match self.patterns.get(pattern) {
            Some(re) if re.is_match(s) => Ok(()),
            _ => Err(format!("value does not match regex pattern {pattern:?}")),
        }
    }
}

/// Where a conversion stands: outside [`with_extension_checks`], inside it before any
/// extension was checked, or inside it with the extensions' validator.
enum Scope {
    Outside,
    Idle,
    Ready(Box<Validator>),
}

thread_local! {
    static SCOPE: RefCell<Scope> = const { RefCell::new(Scope::Outside) };
}

/// Runs `f` (the conversion of one response, or of the bootstrap) with one validator of
/// the extensions' configs, decoded at the first [`check_extension`] and dropped when `f`
/// returns: one decoding of the set per response, none while idle.
pub fn with_extension_checks<R>(f: impl FnOnce() -> R) -> R {
    with_extension_checks_kept(&mut Kept::default(), f)
}

/// Validators a caller that converts one response after another (the xDS client) keeps
/// between them, so that a response costs its checks and not also a decoding of the
/// descriptor sets (milliseconds, more than applying a one-endpoint EDS update). The caller
/// drops it once updates stop, so that an idle proxy still holds neither set.
#[derive(Default)]
pub struct Kept {
    resources: Option<Validator>,
    extensions: Option<Box<Validator>>,
}

impl Kept {
    /// Whether it holds any validator.
    pub fn is_empty(&self) -> bool {
        self.resources.is_none() && self.extensions.is_none()
    }

    /// The validator of the resource types, decoded on first use.
    pub fn resources(&mut self) -> Result<&mut Validator, Violation> {
        match &mut self.resources {
            Some(validator) => Ok(validator),
            empty => Ok(empty.insert(Validator::new()?)),
        }
    }
}

/// [`with_extension_checks`] with the extensions' validator `kept` holds (decoded at the
/// first check if it holds none), left in `kept` afterwards.
pub fn with_extension_checks_kept<R>(kept: &mut Kept, f: impl FnOnce() -> R) -> R {
    /// Puts the scope back to `Outside` and the validator, if one was decoded, into the slot.
    struct Restore<'a>(Option<&'a mut Option<Box<Validator>>>);
    impl Drop for Restore<'_> {
        fn drop(&mut self) {
            if let Some(slot) = self.0.take() {
                let scope = SCOPE.with(|scope| std::mem::replace(&mut *scope.borrow_mut(), Scope::Outside));
                if let Scope::Ready(validator) = scope {
                    *slot = Some(validator);
                }
            }
        }
    }
    let slot = &mut kept.extensions;
    let installed = SCOPE.with(|scope| {
        let mut scope = scope.borrow_mut();
        match *scope {
            Scope::Outside => {
                *scope = slot.take().map_or(Scope::Idle, Scope::Ready);
                true
            }
            Scope::Idle | Scope::Ready(_) => false, // nested: the outer scope's validator serves
        }
    });
    let _restore = Restore(installed.then_some(slot));
    f()
}

/// Checks an extension's config (the message `full_name`, as `bytes`) against its proto's
/// constraints, with the validator of the enclosing [`with_extension_checks`] (or one of
/// its own outside any).
pub fn check_extension(full_name: &str, bytes: &[u8]) -> Result<(), Violation> {
    SCOPE.with(|scope| {
        let mut scope = scope.borrow_mut();
        match &mut *scope {
            Scope::Ready(validator) => validator.check_extension(full_name, bytes),
            Scope::Idle => {
                let mut validator = Box::new(Validator::of(Set::Extensions)?);
                let checked = validator.check_extension(full_name, bytes);
                *scope = Scope::Ready(validator);
                checked
            }
            Scope::Outside => Validator::of(Set::Extensions)?.check_extension(full_name, bytes),
        }
    })
}

/// What checking a message asks: `(validate.disabled)`/`(validate.ignored)`, the
/// `(validate.required)` oneofs, and each field's `(validate.rules)`.
struct Plan {
    skip: bool,
    required_oneofs: Vec<OneofDescriptor>,
    fields: Vec<FieldPlan>,
}

/// A field, with its `(validate.rules)` if it has any.
struct FieldPlan {
    rules: Option<Rules>,
    field: FieldDescriptor,
    in_oneof: bool,
}

/// Where a check is in the resource, printed as Outrider's field paths are.
#[derive(Default)]
struct Path(Vec<Part>);

enum Part {
    Field(FieldDescriptor),
    /// A required oneof, by name.
    Oneof(String),
    Index(usize),
    Key(String),
}

impl Path {
    fn push(&mut self, part: Part) {
        self.0.push(part);
    }
    fn pop(&mut self) {
        self.0.pop();
    }
}

impl std::fmt::Display for Path {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, part) in self.0.iter().enumerate() {
            match part {
                Part::Field(field) if i == 0 => f.write_str(field.name())?,
                Part::Field(field) => write!(f, ".{}", field.name())?,
                Part::Oneof(name) if i == 0 => f.write_str(name)?,
                Part::Oneof(name) => write!(f, ".{name}")?,
                Part::Index(index) => write!(f, "[{index}]")?,
                Part::Key(key) => write!(f, "[{key}]")?,
            }
        }
        Ok(())
    }
}

fn flag(options: &DynamicMessage, extension: &ExtensionDescriptor) -> bool {
    options.has_extension(extension) && options.get_extension(extension).as_bool() == Some(true)
}

fn flag_named(rules: &Rules, name: &str) -> bool {
    set(rules, name).is_some_and(|v| v.as_bool() == Some(true))
}

/// A rule's value, only when the rule is given (validate.proto is proto2: presence is known).
fn set<'a>(rules: &'a Rules, name: &str) -> Option<Cow<'a, Value>> {
    rules.get(name).map(|rule| Cow::Borrowed(&rule.value))
}

/// A nested rules message (`FieldRules.string`, `MapRules.keys`, …).
fn sub<'a>(rules: &'a Rules, name: &str) -> Option<&'a Rules> {
    rules.get(name)?.nested.as_ref()
}

/// A rules message, read once: the rules it sets, each with its nested rules message when
/// it is one. A check looks a rule up by name among the few a message sets, which costs
/// less than the descriptor's hashed look-ups did for every rule of every value checked.
#[derive(Debug)]
struct Rules(Vec<(String, Rule)>);

#[derive(Debug)]
struct Rule {
    value: Value,
    nested: Option<Rules>,
}

impl Rules {
    fn read(message: &DynamicMessage) -> Self {
        let set = message.fields().map(|(field, value)| {
            let nested = match value {
                Value::Message(m) => Some(Rules::read(m)),
                _ => None,
            };
            (field.name().to_owned(), Rule { value: value.clone(), nested })
        });
        Self(set.collect())
    }

    fn get(&self, name: &str) -> Option<&Rule> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, rule)| rule)
    }
}

fn oneof_set(message: &DynamicMessage, oneof: &OneofDescriptor) -> bool {
    oneof.fields().any(|f| message.has_field(&f))
}

fn text_field(message: &DynamicMessage, name: &str) -> String {
    match message.get_field_by_name(name).as_deref() {
        Some(Value::String(s)) => s.clone(),
        _ => String::new(),
    }
}

/// The rules kind of a wrapper type's `value` (`google.protobuf.UInt32Value` → `uint32`).
fn wrapper_rule(full_name: &str) -> Option<&'static str> {
    Some(match full_name {
        "google.protobuf.DoubleValue" => "double",
        "google.protobuf.FloatValue" => "float",
        "google.protobuf.Int64Value" => "int64",
        "google.protobuf.UInt64Value" => "uint64",
        "google.protobuf.Int32Value" => "int32",
        "google.protobuf.UInt32Value" => "uint32",
        "google.protobuf.BoolValue" => "bool",
        "google.protobuf.StringValue" => "string",
        "google.protobuf.BytesValue" => "bytes",
        _ => return None,
    })
}

fn count(len: usize, rules: &Rules, min: &str, max: &str, what: &str) -> Result<(), String> {
    let bound = |name: &str| set(rules, name).and_then(|v| v.as_u64());
    let len = u64::try_from(len).unwrap_or(u64::MAX);
    if let Some(min) = bound(min)
        && len < min
    {
        return Err(format!("value must contain at least {min} {what}(s)"));
    }
    if let Some(max) = bound(max)
        && len > max
    {
        return Err(format!("value must contain no more than {max} {what}(s)"));
    }
    Ok(())
}

fn lengths(rules: &Rules, len: usize, [exact, min, max]: [&str; 3], unit: &str) -> Result<(), String> {
    let bound = |name: &str| set(rules, name).and_then(|v| v.as_u64());
    let len = u64::try_from(len).unwrap_or(u64::MAX);
    if let Some(exact) = bound(exact)
        && len != exact
    {
        return Err(format!("value length must be {exact} {unit}"));
    }
    if let Some(min) = bound(min)
        && len < min
    {
        return Err(format!("value length must be at least {min} {unit}"));
    }
    if let Some(max) = bound(max)
        && len > max
    {
        return Err(format!("value length must be at most {max} {unit}"));
    }
    Ok(())
}

fn affixes(rules: &Rules, value: &[u8], bytes_of: impl Fn(&Value) -> Option<Vec<u8>>) -> Result<(), String> {
    let rule = |name: &str| set(rules, name).and_then(|v| bytes_of(&v));
    if let Some(c) = rule("const")
        && value != c.as_slice()
    {
        return Err(format!("value must equal {:?}", String::from_utf8_lossy(&c)));
    }
    if let Some(prefix) = rule("prefix")
        && !value.starts_with(&prefix)
    {
        return Err(format!("value does not have prefix {:?}", String::from_utf8_lossy(&prefix)));
    }
    if let Some(suffix) = rule("suffix")
        && !value.ends_with(&suffix)
    {
        return Err(format!("value does not have suffix {:?}", String::from_utf8_lossy(&suffix)));
    }
    if let Some(needle) = rule("contains")
        && !needle.is_empty()
        && !value.windows(needle.len()).any(|w| w == needle.as_slice())
    {
        return Err(format!("value does not contain {:?}", String::from_utf8_lossy(&needle)));
    }
    Ok(())
}

/// `in` and `not_in`.
fn membership(rules: &Rules, value: &Value, what: &str) -> Result<(), String> {
    if let Some(Value::List(allowed)) = set(rules, "in").as_deref()
        && !allowed.contains(value)
    {
        return Err(format!("{what} must be in list {allowed:?}"));
    }
    if let Some(Value::List(denied)) = set(rules, "not_in").as_deref()
        && denied.contains(value)
    {
        return Err(format!("{what} must not be in list {denied:?}"));
    }
    Ok(())
}

/// `email`, `hostname`, `ip`..., and `well_known_regex` (HTTP header names and values).
fn well_known_string(rules: &Rules, s: &str) -> Result<(), String> {
    let ok = |rule: &str, valid: bool| if flag_named(rules, rule) && !valid { Err(rule.to_owned()) } else { Ok(()) };
    let checks = || -> Result<(), String> {
        ok("ip", s.parse::<std::net::IpAddr>().is_ok())?;
        ok("ipv4", s.parse::<std::net::Ipv4Addr>().is_ok())?;
        ok("ipv6", s.parse::<std::net::Ipv6Addr>().is_ok())?;
        ok("hostname", hostname(s))?;
        ok("address", s.parse::<std::net::IpAddr>().is_ok() || hostname(s))?;
        ok("uuid", uuid(s))?;
        ok("email", s.split_once('@').is_some_and(|(local, host)| !local.is_empty() && hostname(host)))?;
        ok("uri", s.split_once(':').is_some_and(|(scheme, _)| scheme_ok(scheme)))?;
        ok("uri_ref", !s.chars().any(char::is_whitespace))
    };
    checks().map_err(|rule| format!("value must be a valid {rule}"))?;
    let Some(Value::EnumNumber(regex)) = set(rules, "well_known_regex").as_deref().cloned() else { return Ok(()) };
    // `strict` defaults to true: RFC 7230 characters; `strict: false` only refuses the
    // characters that would break a header (NUL, CR, LF).
    let strict = set(rules, "strict").and_then(|v| v.as_bool()).unwrap_or(true);
    let valid = match (regex, strict) {
        (_, false) => !s.contains(['\0', '\r', '\n']),
        (1, true) => header_name(s),
        (2, true) => !s.chars().any(|c| matches!(c, '\0'..='\u{8}' | '\u{a}'..='\u{1f}' | '\u{7f}')),
        _ => true,
    };
    let what = if regex == 1 { "HTTP header name" } else { "HTTP header value" };
    if valid { Ok(()) } else { Err(format!("value must be a valid {what}")) }
}

fn header_name(s: &str) -> bool {
    let name = s.strip_prefix(':').unwrap_or(s);
    !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_|~`".contains(c))
}

fn hostname(s: &str) -> bool {
    let s = s.strip_suffix('.').unwrap_or(s);
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        })
}

fn uuid(s: &str) -> bool {
    let groups: Vec<&str> = s.split('-').collect();
    groups.iter().map(|g| g.len()).eq([8, 4, 4, 4, 12])
        && groups.iter().all(|g| g.chars().all(|c| c.is_ascii_hexdigit()))
}

fn scheme_ok(scheme: &str) -> bool {
    scheme.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && scheme.chars().all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
}

/// A number as the rules compare it: integers exactly, floats as floats.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Num {
    Int(i128),
    Float(f64),
}

impl Num {
    fn of(value: &Value) -> Option<Num> {
        Some(match value {
            Value::I32(i) | Value::EnumNumber(i) => Num::Int(i128::from(*i)),
            Value::I64(i) => Num::Int(i128::from(*i)),
            Value::U32(i) => Num::Int(i128::from(*i)),
            Value::U64(i) => Num::Int(i128::from(*i)),
            Value::F32(f) => Num::Float(f64::from(*f)),
            Value::F64(f) => Num::Float(*f),
            _ => return None,
        })
    }

    fn cmp(self, other: Num) -> Option<std::cmp::Ordering> {
        match (self, other) {
            (Num::Int(a), Num::Int(b)) => Some(a.cmp(&b)),
            (Num::Float(a), Num::Float(b)) => a.partial_cmp(&b),
            _ => None,
        }
    }
}

impl std::fmt::Display for Num {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Num::Int(i) => write!(f, "{i}"),
            Num::Float(x) => write!(f, "{x}"),
        }
    }
}

/// `const`, the range (`lt`, `lte`, `gt`, `gte`), `in` and `not_in` of a number, an enum
/// (`range` false: enums have no range rules) or a duration in nanoseconds.
fn numeric(rules: &Rules, value: &Num, range: bool) -> Result<(), String> {
    if (matches!(value, Num::Int(0)) || matches!(value, Num::Float(f) if *f == 0.0))
        && flag_named(rules, "ignore_empty")
    {
        return Ok(());
    }
    let rule = |name: &str| set(rules, name).and_then(|v| Num::of(&v));
    if let Some(c) = rule("const")
        && value.cmp(c) != Some(std::cmp::Ordering::Equal)
    {
        return Err(format!("value must equal {c}"));
    }
    if range {
        bounds(*value, rule("lt"), rule("lte"), rule("gt"), rule("gte"), |n| n.to_string())?;
    }
    let list = |name: &str| match set(rules, name).as_deref() {
        Some(Value::List(items)) => items.iter().filter_map(Num::of).collect(),
        _ => Vec::new(),
    };
    let allowed: Vec<Num> = list("in");
    if !allowed.is_empty() && !allowed.iter().any(|a| value.cmp(*a) == Some(std::cmp::Ordering::Equal)) {
        return Err(format!("value must be in list {allowed:?}"));
    }
    if list("not_in").iter().any(|d| value.cmp(*d) == Some(std::cmp::Ordering::Equal)) {
        return Err("value must not be in the list of forbidden values".into());
    }
    Ok(())
}

/// The range rules, as protoc-gen-validate reads them: with a lower and an upper bound, a
/// lower bound above the upper one means "outside the range".
fn bounds(
    value: Num,
    lt: Option<Num>,
    lte: Option<Num>,
    gt: Option<Num>,
    gte: Option<Num>,
    show: impl Fn(Num) -> String,
) -> Result<(), String> {
    use std::cmp::Ordering::{Equal, Greater, Less};
    let below_upper = match (lt, lte) {
        (Some(lt), _) => Some((value.cmp(lt) == Some(Less), lt, "less than")),
        (None, Some(lte)) => Some((matches!(value.cmp(lte), Some(Less | Equal)), lte, "less than or equal to")),
        _ => None,
    };
    let above_lower = match (gt, gte) {
        (Some(gt), _) => Some((value.cmp(gt) == Some(Greater), gt, "greater than")),
        (None, Some(gte)) => Some((matches!(value.cmp(gte), Some(Greater | Equal)), gte, "greater than or equal to")),
        _ => None,
    };
    match (above_lower, below_upper) {
        (Some((lower_ok, lower, l)), Some((upper_ok, upper, u))) => {
            let outside = lower.cmp(upper) == Some(Greater);
            let ok = if outside { lower_ok || upper_ok } else { lower_ok && upper_ok };
            if ok {
                Ok(())
            } else if outside {
                Err(format!("value must be {l} {} or {u} {}", show(lower), show(upper)))
            } else {
                Err(format!("value must be {l} {} and {u} {}", show(lower), show(upper)))
            }
        }
        (Some((false, lower, l)), None) => Err(format!("value must be {l} {}", show(lower))),
        (None, Some((false, upper, u))) => Err(format!("value must be {u} {}", show(upper))),
        _ => Ok(()),
    }
}

/// A `Duration` or `Timestamp` message as nanoseconds.
fn nanos(message: &DynamicMessage) -> Num {
    let seconds = message.get_field_by_name("seconds").and_then(|v| v.as_i64()).unwrap_or(0);
    let nanos = message.get_field_by_name("nanos").and_then(|v| v.as_i32()).unwrap_or(0);
    // An i64 of seconds in nanoseconds is far inside i128; saturating all the same.
    Num::Int(i128::from(seconds).saturating_mul(1_000_000_000).saturating_add(i128::from(nanos)))
}

/// A duration or a timestamp against `DurationRules` or `TimestampRules`.
fn time(rules: &Rules, value: Num, timestamp: bool) -> Result<(), String> {
    let rule = |name: &str| set(rules, name).and_then(|v| v.as_message().map(nanos));
    let show = |n: Num| match n {
        Num::Int(n) if n % 1_000_000_000 == 0 => format!("{}s", n / 1_000_000_000),
        Num::Int(n) => format!("{}s", n as f64 / 1e9),
        Num::Float(f) => format!("{f}s"),
    };
    if let Some(c) = rule("const")
        && value != c
    {
        return Err(format!("value must equal {}", show(c)));
    }
    bounds(value, rule("lt"), rule("lte"), rule("gt"), rule("gte"), show)?;
    let list = |name: &str| match set(rules, name).as_deref() {
        Some(Value::List(items)) => items.iter().filter_map(|v| v.as_message().map(nanos)).collect::<Vec<_>>(),
        _ => Vec::new(),
    };
    let allowed = list("in");
    if !allowed.is_empty() && !allowed.contains(&value) {
        return Err("value must be in the list of allowed durations".into());
    }
    if list("not_in").contains(&value) {
        return Err("value must not be in the list of forbidden durations".into());
    }
    if timestamp {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| Num::Int(i128::try_from(d.as_nanos()).unwrap_or(i128::MAX)))
            .unwrap_or(Num::Int(0));
        if flag_named(rules, "lt_now") && value.cmp(now) != Some(std::cmp::Ordering::Less) {
            return Err("value must be less than now".into());
        }
        if flag_named(rules, "gt_now") && value.cmp(now) != Some(std::cmp::Ordering::Greater) {
            return Err("value must be greater than now".into());
        }
        if let (Some(Num::Int(within)), Num::Int(now), Num::Int(v)) = (rule("within"), now, value)
            && v.saturating_sub(now).saturating_abs() > within
        {
            return Err(format!("value must be within {} of now", show(Num::Int(within))));
        }
    }
    Ok(())
}

fn unique(items: &[Value]) -> bool {
    items.iter().enumerate().all(|(i, a)| items.iter().skip(i + 1).all(|b| a != b))
}

#[cfg(test)]
mod tests;
