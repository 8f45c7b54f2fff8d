//! Fixed header additions a filter makes (`response_headers_to_add` on a local rate
//! limit's refusal, `request_headers_to_add_when_not_enforced`), with Envoy's append
//! actions. Values are literal: conversion refuses `%COMMAND%` substitutions here.

use http::{HeaderMap, HeaderValue};

use crate::config::route::{HeaderAppendAction, HeaderValueOption};

/// Envoy's order within one list: overwrites first, then appends, each decided on the
/// headers as they were before the list.
pub fn apply(headers: &mut HeaderMap, options: &[HeaderValueOption]) {
    let mut overwrite = Vec::new();
    let mut append = Vec::new();
    for option in options {
        if option.value.is_empty() && !option.keep_empty_value {
            continue;
        }
        let Ok(value) = HeaderValue::from_str(&option.value) else {
            continue;
        };
        let present = headers.contains_key(&option.name);
        match option.append_action {
            HeaderAppendAction::AppendIfExistsOrAdd => append.push((&option.name, value)),
            HeaderAppendAction::AddIfAbsent if !present => append.push((&option.name, value)),
            HeaderAppendAction::OverwriteIfExists if present => overwrite.push((&option.name, value)),
            HeaderAppendAction::OverwriteIfExistsOrAdd => overwrite.push((&option.name, value)),
            HeaderAppendAction::AddIfAbsent | HeaderAppendAction::OverwriteIfExists => {}
        }
    }
    for (name, value) in overwrite {
        headers.insert(name, value);
    }
    for (name, value) in append {
        headers.append(name, value);
    }
}
