//! Data as templates see it. The data queries' results arrive as relaxed Extended JSON
//! (`Bson::into_relaxed_extjson`), and samples are written in it: dates, ids and the
//! numbers JSON has no type for come wrapped (`{"$date": ...}`, `{"$oid": ...}`,
//! `{"$numberLong": ...}`); templates get them unwrapped, and every string made printable
//! (names are data, never markup or template source, and hold no control characters).

use super::DateValue;
use crate::domain::text::printable;
use minijinja::Value;
use serde_json::Value as Json;
use std::collections::BTreeMap;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

/// `json` as templates see it:
/// - `{"$date": "<RFC 3339>"}`, `{"$date": {"$numberLong": "<ms>"}}` or `{"$date": <ms>}`:
///   a `DateValue`;
/// - `{"$oid": "<24 hex digits>"}`: the hex string (lowercase);
/// - `{"$numberDecimal": "1.50"}`: the string, as written (no float rounds it);
/// - `{"$numberLong"|"$numberInt": "<digits>"}`, `{"$numberDouble": "<float>|Infinity|NaN"}`:
///   the number;
/// - strings made printable (`text::printable`), documents and lists kept, other wrappers
///   (`$binary`, `$timestamp`...) kept as the documents they are.
///
/// An error names the field (`followers.names[2]`) and what is wrong with it.
pub fn to_value(json: &Json) -> Result<Value, String> {
    convert(json).map_err(|e| e.to_string())
}

/// Every data query's result, as the template variable `data`; an error names the field
/// under `prefix` (`data`).
pub fn data_value(data: &BTreeMap<String, Json>, prefix: &str) -> Result<Value, String> {
    let mut map = BTreeMap::new();
    for (name, json) in data {
        let value = convert(json).map_err(|mut e| {
            e.path.push(Segment::Key(name.clone()));
            e.path.push(Segment::Key(prefix.to_owned()));
            e.to_string()
        })?;
        map.insert(printable(name), value);
    }
    Ok(Value::from(map))
}

enum Segment {
    Key(String),
    Index(usize),
}

/// What is wrong, and where: the path is innermost first (built on the way out, so a value
/// that converts costs no path).
struct ConvertError {
    path: Vec<Segment>,
    detail: String,
}

impl std::fmt::Display for ConvertError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut first = true;
        for segment in self.path.iter().rev() {
            match segment {
                Segment::Key(k) if first => write!(f, "{k}")?,
                Segment::Key(k) => write!(f, ".{k}")?,
                Segment::Index(i) => write!(f, "[{i}]")?,
            }
            first = false;
        }
        if first {
            write!(f, "{}", self.detail)
        } else {
            write!(f, ": {}", self.detail)
        }
    }
}

fn convert(json: &Json) -> Result<Value, ConvertError> {
    Ok(match json {
        Json::Null => Value::from(()),
        Json::Bool(b) => Value::from(*b),
        Json::Number(n) => number(n),
        Json::String(s) => Value::from(printable(s)),
        Json::Array(items) => {
            let mut list = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                list.push(convert(item).map_err(|mut e| {
                    e.path.push(Segment::Index(i));
                    e
                })?);
            }
            Value::from(list)
        }
        Json::Object(fields) => {
            if fields.len() == 1 {
                let (key, inner) = fields.iter().next().expect("one field");
                if let Some(value) = wrapped(key, inner) {
                    return value.map_err(|detail| ConvertError {
                        path: vec![Segment::Key(key.clone())],
                        detail,
                    });
                }
            }
            let mut map = BTreeMap::new();
            for (key, value) in fields {
                let value = convert(value).map_err(|mut e| {
                    e.path.push(Segment::Key(key.clone()));
                    e
                })?;
                map.insert(printable(key), value);
            }
            Value::from(map)
        }
    })
}

fn number(n: &serde_json::Number) -> Value {
    if let Some(i) = n.as_i64() {
        Value::from(i)
    } else if let Some(u) = n.as_u64() {
        Value::from(u)
    } else {
        Value::from(n.as_f64().unwrap_or(f64::NAN))
    }
}

/// The value an Extended JSON wrapper stands for; None: `key` is no wrapper of those.
fn wrapped(key: &str, inner: &Json) -> Option<Result<Value, String>> {
    let text = |what: &str| match inner {
        Json::String(s) => Ok(s.as_str()),
        other => Err(format!("{what} must be a string, not {}", kind(other))),
    };
    Some(match key {
        "$date" => date(inner).map(DateValue::value),
        "$oid" => text("$oid").and_then(|hex| {
            if hex.len() == 24 && hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                Ok(Value::from(hex.to_ascii_lowercase()))
            } else {
                Err(format!(
                    "{} is not an ObjectId (24 hex digits)",
                    crate::domain::quoted(hex)
                ))
            }
        }),
        "$numberDecimal" => text("$numberDecimal").map(|d| Value::from(printable(d))),
        "$numberLong" => text("$numberLong").and_then(|s| {
            s.parse::<i64>()
                .map(Value::from)
                .map_err(|_| not_a("64-bit whole number", s))
        }),
        "$numberInt" => text("$numberInt").and_then(|s| {
            s.parse::<i32>()
                .map(|i| Value::from(i64::from(i)))
                .map_err(|_| not_a("32-bit whole number", s))
        }),
        "$numberDouble" => text("$numberDouble").and_then(|s| {
            match s {
                "Infinity" => Ok(f64::INFINITY),
                "-Infinity" => Ok(f64::NEG_INFINITY),
                "NaN" => Ok(f64::NAN),
                s => s.parse::<f64>().map_err(|_| not_a("number", s)),
            }
            .map(Value::from)
        }),
        _ => return None,
    })
}

fn not_a(what: &str, s: &str) -> String {
    format!("{} is not a {what}", crate::domain::quoted(s))
}

fn date(inner: &Json) -> Result<OffsetDateTime, String> {
    let millis = match inner {
        Json::String(s) => {
            return OffsetDateTime::parse(s, &Rfc3339)
                .map_err(|e| format!("{} is not an RFC 3339 date ({e})", crate::domain::quoted(s)))
        }
        Json::Number(n) => n
            .as_i64()
            .ok_or_else(|| format!("{n} is not a whole number of milliseconds"))?,
        Json::Object(o) if o.len() == 1 => match o.get("$numberLong") {
            Some(Json::String(s)) => s
                .parse::<i64>()
                .map_err(|_| not_a("whole number of milliseconds", s))?,
            _ => return Err("must be a string, a number or {\"$numberLong\": \"<ms>\"}".into()),
        },
        other => {
            return Err(format!(
                "must be a string, a number or {{\"$numberLong\": \"<ms>\"}}, not {}",
                kind(other)
            ))
        }
    };
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(millis) * 1_000_000)
        .map_err(|_| format!("{millis} milliseconds is out of the dates' range"))
}

fn kind(json: &Json) -> &'static str {
    match json {
        Json::Null => "null",
        Json::Bool(_) => "a boolean",
        Json::Number(_) => "a number",
        Json::String(_) => "a string",
        Json::Array(_) => "a list",
        Json::Object(_) => "a document",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use minijinja::{Environment, UndefinedBehavior};
    use serde_json::json;

    /// `template` rendered with `v` as `v`, strict as the definitions' templates are.
    fn show(template: &str, v: Value) -> String {
        let mut env = Environment::new();
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        env.render_str(template, minijinja::context! { v => v })
            .unwrap()
    }

    fn of(j: Json) -> Value {
        to_value(&j).unwrap()
    }

    #[test]
    fn dates_in_every_form_become_date_values() {
        for j in [
            json!({"$date": "2026-11-23T09:30:00Z"}),
            json!({"$date": "2026-11-23T10:30:00+01:00"}),
            json!({"$date": {"$numberLong": "1795426200000"}}),
            json!({"$date": 1_795_426_200_000_i64}),
        ] {
            let v = of(j.clone());
            assert_eq!(
                show(
                    "{{ v }} {{ v.day }}.{{ v.month }}.{{ v.year }} {{ v.hour }}",
                    v
                ),
                if j["$date"].as_str().is_some_and(|s| s.contains('+')) {
                    "2026-11-23T10:30:00+01:00 23.11.2026 10"
                } else {
                    "2026-11-23T09:30:00Z 23.11.2026 9"
                },
                "{j}"
            );
        }
        // Before 1970 and with milliseconds, as the driver writes them.
        assert_eq!(
            show(
                "{{ v.iso }}",
                of(json!({"$date": {"$numberLong": "-86400000"}}))
            ),
            "1969-12-31T00:00:00Z"
        );
        assert_eq!(
            show(
                "{{ v.second }}",
                of(json!({"$date": "2026-01-01T00:00:07.123Z"}))
            ),
            "7"
        );
    }

    #[test]
    fn ids_decimals_and_wrapped_numbers_unwrap() {
        let v = of(json!({
            "id": {"$oid": "65A1B2C3D4E5F60718293A4B"},
            "price": {"$numberDecimal": "1.50"},
            "big": {"$numberLong": "9007199254740993"},
            "small": {"$numberInt": "-7"},
            "inf": {"$numberDouble": "-Infinity"},
            "half": {"$numberDouble": "0.5"},
            "plain": 12_345,
            "float": 2.5,
            "huge": 18_446_744_073_709_551_615_u64,
        }));
        assert_eq!(
            show(
                "{{ v.id }} {{ v.price }} {{ v.big }} {{ v.small + 1 }} {{ v.inf }} {{ v.half * 2 }} {{ v.plain }} {{ v.float }} {{ v.huge }}",
                v.clone()
            ),
            "65a1b2c3d4e5f60718293a4b 1.50 9007199254740993 -6 -inf 1.0 12345 2.5 18446744073709551615"
        );
        assert_eq!(show("{{ v.big == 9007199254740993 }}", v), "True");
        let nan = of(json!({"$numberDouble": "NaN"}));
        assert_eq!(show("{{ v }}", nan), "NaN");
    }

    #[test]
    fn strings_are_made_printable_at_any_depth() {
        let v = of(json!({
            "names": ["Ada\u{0}", "<b>Bob</b>\r\n", "李小龍 \u{FFFF}"],
            "deep": {"a": [{"b": "x\u{7}y"}]},
            "k\u{0}ey": "v",
        }));
        assert_eq!(
            show("{{ v.names|join('|') }} {{ v.deep.a[0].b }} {{ v.key }}", v),
            "Ada|<b>Bob</b>  |李小龍  xy v"
        );
    }

    #[test]
    fn documents_lists_nulls_and_other_wrappers_are_kept() {
        let v = of(json!({
            "none": null,
            "empty": [],
            "flag": false,
            "bin": {"$binary": {"base64": "AA==", "subType": "00"}},
            "two": {"$oid": "65a1b2c3d4e5f60718293a4b", "x": 1},
            "ts": {"$timestamp": {"t": 1, "i": 2}},
        }));
        assert_eq!(
            show(
                "{{ v.none is none }} {{ v.empty|length }} {{ v.flag }} {{ v.bin['$binary'].subType }} {{ v.two['$oid'] }} {{ v.ts['$timestamp'].i }}",
                v
            ),
            "True 0 False 00 65a1b2c3d4e5f60718293a4b 2"
        );
    }

    #[test]
    fn a_bad_wrapper_is_an_error_naming_the_field() {
        let data: BTreeMap<String, Json> = [(
            "followers".to_owned(),
            json!({"names": ["a", {"$date": "yesterday"}]}),
        )]
        .into();
        let err = data_value(&data, "data").unwrap_err();
        assert_eq!(
            err,
            "data.followers.names[1].$date: \"yesterday\" is not an RFC 3339 date (the 'year' component could not be parsed)"
        );
        for (j, says) in [
            (json!({"$oid": "xyz"}), "$oid: \"xyz\" is not an ObjectId"),
            (
                json!({"$oid": 7}),
                "$oid: $oid must be a string, not a number",
            ),
            (json!({"$numberLong": "1.5"}), "not a 64-bit whole number"),
            (
                json!({"$numberLong": "99999999999999999999"}),
                "not a 64-bit",
            ),
            (json!({"$numberInt": "2147483648"}), "not a 32-bit"),
            (json!({"$numberDouble": "lots"}), "is not a number"),
            (
                json!({"$numberDecimal": null}),
                "must be a string, not null",
            ),
            (json!({"$date": [1]}), "not a list"),
            (
                json!({"$date": {"$numberLong": "x"}}),
                "whole number of milliseconds",
            ),
            (json!({"$date": 1.5}), "not a whole number of milliseconds"),
            (
                json!({"$date": {"$numberLong": "9223372036854775807"}}),
                "out of the dates' range",
            ),
        ] {
            let err = to_value(&j).unwrap_err();
            assert!(err.contains(says), "{j}: {err}");
        }
    }
}
