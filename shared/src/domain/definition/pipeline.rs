//! A definition's aggregation pipelines: Extended JSON arrays of stages, checked before any
//! reaches MongoDB. A definition only reads (no `$out`, `$merge`) and runs no JavaScript
//! (`$function`, `$where`, `$accumulator`), at any depth; every `$$variable` it names is one
//! the adapter binds (`let`), one of MongoDB's own, or one bound inside the pipeline.

use serde_json::Value;
use std::collections::BTreeSet;

/// MongoDB's own variables: always defined.
pub const SYSTEM_VARIABLES: &[&str] = &[
    "ROOT",
    "CURRENT",
    "NOW",
    "CLUSTER_TIME",
    "REMOVE",
    "DESCEND",
    "PRUNE",
    "KEEP",
    "SEARCH_META",
    "USER_ROLES",
];

/// What no definition may name, as a stage or as an operator, and why.
pub const FORBIDDEN: &[(&str, &str)] = &[
    ("$out", "writes to the database"),
    ("$merge", "writes to the database"),
    ("$function", "runs server-side code"),
    ("$where", "runs server-side code"),
    ("$accumulator", "runs server-side code"),
];

/// One problem of a pipeline: the message, and a token of its text to find its line by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    pub message: String,
    /// What to look for in the source to say where (`"$out"`, `"$$since`), if anything.
    pub token: Option<String>,
    /// A line of the pipeline's own text (1-based), when the parser knows it.
    pub line: Option<usize>,
}

impl Problem {
    fn new(message: String, token: Option<String>) -> Self {
        Self {
            message,
            token,
            line: None,
        }
    }
}

/// Parses `text` (a JSON array of stages) and checks it with `defined` the variables the
/// adapter binds. The stages are returned as written (key order kept).
pub fn parse(text: &str, defined: &BTreeSet<String>) -> Result<Vec<Value>, Vec<Problem>> {
    let value: Value = serde_json::from_str(text).map_err(|e| {
        vec![Problem {
            message: format!(
                "not JSON ({}); write an Extended JSON array of stages, as Compass exports it",
                strip_position(&e.to_string())
            ),
            token: None,
            line: Some(e.line().max(1)),
        }]
    })?;
    let Value::Array(stages) = value else {
        return Err(vec![Problem::new(
            "not an array; write the stages as [{\"$match\": ...}, ...]".to_owned(),
            None,
        )]);
    };
    let mut walk = Walk::default();
    let scope: Vec<String> = defined.iter().cloned().collect();
    walk.stages(&stages, &scope, "");
    if let Err(e) = mongodb::bson::Bson::try_from(Value::Array(stages.clone())) {
        walk.problems.push(Problem::new(
            format!("not valid Extended JSON ({e}); check the $date, $oid and $number... values"),
            None,
        ));
    }
    if walk.problems.is_empty() {
        Ok(stages)
    } else {
        Err(walk.problems)
    }
}

/// serde_json's message without its " at line L column C" (the caller says the line).
fn strip_position(message: &str) -> &str {
    message
        .rfind(" at line ")
        .map_or(message, |at| &message[..at])
}

#[derive(Default)]
struct Walk {
    problems: Vec<Problem>,
}

impl Walk {
    /// `within`: where a sub-pipeline sits (`$lookup's pipeline, `), empty at the top.
    fn stages(&mut self, stages: &[Value], scope: &[String], within: &str) {
        for (i, stage) in stages.iter().enumerate() {
            let n = i + 1;
            let Some(doc) = stage.as_object() else {
                self.problems.push(Problem::new(
                    format!("{within}stage {n} is not a document; write it as {{\"$stage\": ...}}"),
                    None,
                ));
                continue;
            };
            if doc.len() != 1 {
                let keys: Vec<&str> = doc.keys().map(String::as_str).collect();
                self.problems.push(Problem::new(
                    format!(
                        "{within}stage {n} has {} keys ({}); a stage is a document of one key, {{\"$stage\": ...}}",
                        keys.len(),
                        keys.join(", ")
                    ),
                    keys.first().map(|k| format!("\"{k}\"")),
                ));
                continue;
            }
            let (name, body) = doc.iter().next().expect("one key");
            if !name.starts_with('$') {
                self.problems.push(Problem::new(
                    format!("{within}stage {n}: {name:?} is not a stage; a stage's name starts with $ ($match, $group, ...)"),
                    Some(format!("\"{name}\"")),
                ));
                continue;
            }
            if self.forbidden(name) {
                continue;
            }
            self.stage(name, body, scope);
        }
    }

    /// Records `key` if it is forbidden (and says so).
    fn forbidden(&mut self, key: &str) -> bool {
        match FORBIDDEN.iter().find(|(k, _)| *k == key) {
            Some((k, why)) => {
                self.problems.push(Problem::new(
                    format!("{k} {why}; a definition only reads: remove it"),
                    Some(format!("\"{k}\"")),
                ));
                true
            }
            None => false,
        }
    }

    fn stage(&mut self, name: &str, body: &Value, scope: &[String]) {
        match (name, body) {
            ("$match", _) => self.query(body, scope),
            ("$lookup", Value::Object(args)) => {
                let mut inner = scope.to_vec();
                if let Some(lets) = args.get("let") {
                    self.expr(lets, scope);
                    if let Some(lets) = lets.as_object() {
                        inner.extend(lets.keys().cloned());
                    }
                }
                for (k, v) in args {
                    match k.as_str() {
                        "let" => {}
                        "pipeline" => self.sub_pipeline(v, &inner, "$lookup"),
                        _ if !self.forbidden(k) => self.expr(v, scope),
                        _ => {}
                    }
                }
            }
            ("$unionWith", Value::Object(args)) => {
                for (k, v) in args {
                    match k.as_str() {
                        "pipeline" => self.sub_pipeline(v, scope, "$unionWith"),
                        _ if !self.forbidden(k) => self.expr(v, scope),
                        _ => {}
                    }
                }
            }
            ("$facet", Value::Object(facets)) => {
                for v in facets.values() {
                    self.sub_pipeline(v, scope, "$facet");
                }
            }
            ("$graphLookup", Value::Object(args)) => {
                for (k, v) in args {
                    match k.as_str() {
                        "restrictSearchWithMatch" => self.query(v, scope),
                        _ if !self.forbidden(k) => self.expr(v, scope),
                        _ => {}
                    }
                }
            }
            ("$geoNear", Value::Object(args)) => {
                for (k, v) in args {
                    match k.as_str() {
                        "query" => self.query(v, scope),
                        _ if !self.forbidden(k) => self.expr(v, scope),
                        _ => {}
                    }
                }
            }
            _ => self.expr(body, scope),
        }
    }

    fn sub_pipeline(&mut self, v: &Value, scope: &[String], stage: &str) {
        match v {
            Value::Array(stages) => self.stages(stages, scope, &format!("{stage}'s pipeline, ")),
            _ => self.problems.push(Problem::new(
                format!("{stage}'s pipeline is not an array of stages"),
                None,
            )),
        }
    }

    /// A query document ($match): its strings are values, not expressions, except inside
    /// `$expr`.
    fn query(&mut self, v: &Value, scope: &[String]) {
        match v {
            Value::Object(doc) => {
                for (k, v) in doc {
                    if self.forbidden(k) {
                        continue;
                    }
                    if k == "$expr" {
                        self.expr(v, scope);
                    } else {
                        self.query(v, scope);
                    }
                }
            }
            Value::Array(items) => items.iter().for_each(|i| self.query(i, scope)),
            _ => {}
        }
    }

    fn expr(&mut self, v: &Value, scope: &[String]) {
        match v {
            Value::String(s) => {
                if let Some(var) = s.strip_prefix("$$") {
                    let name = var.split('.').next().unwrap_or_default();
                    if !scope.iter().any(|d| d == name) && !SYSTEM_VARIABLES.contains(&name) {
                        self.problems.push(Problem::new(
                            format!("$${name} is not defined; {}", defined_list(scope)),
                            Some(format!("\"$${name}")),
                        ));
                    }
                }
            }
            Value::Array(items) => items.iter().for_each(|i| self.expr(i, scope)),
            Value::Object(doc) => {
                if doc.len() == 1 {
                    let (op, args) = doc.iter().next().expect("one key");
                    if self.binding(op, args, scope) {
                        return;
                    }
                }
                for (k, v) in doc {
                    if !self.forbidden(k) {
                        self.expr(v, scope);
                    }
                }
            }
            _ => {}
        }
    }

    /// The operators that bind variables ($let, $map, $filter, $reduce) and `$literal`
    /// (whose argument is not evaluated): true when handled.
    fn binding(&mut self, op: &str, args: &Value, scope: &[String]) -> bool {
        let Some(a) = args.as_object() else {
            return op == "$literal";
        };
        let bound = |names: &[String]| -> Vec<String> {
            let mut inner = scope.to_vec();
            inner.extend(names.iter().cloned());
            inner
        };
        let r#as = || {
            a.get("as")
                .and_then(Value::as_str)
                .unwrap_or("this")
                .to_owned()
        };
        let (inner, body_keys): (Vec<String>, &[&str]) = match op {
            "$literal" => return true,
            "$let" => {
                let names: Vec<String> = a
                    .get("vars")
                    .and_then(Value::as_object)
                    .map(|vars| vars.keys().cloned().collect())
                    .unwrap_or_default();
                (bound(&names), &["in"])
            }
            "$map" => (bound(&[r#as()]), &["in"]),
            "$filter" => (bound(&[r#as()]), &["cond"]),
            "$reduce" => (bound(&["this".to_owned(), "value".to_owned()]), &["in"]),
            _ => return false,
        };
        for (k, v) in a {
            if self.forbidden(k) {
                continue;
            }
            if body_keys.contains(&k.as_str()) {
                self.expr(v, &inner);
            } else if op == "$let" && k == "vars" {
                if let Some(vars) = v.as_object() {
                    vars.values().for_each(|v| self.expr(v, scope));
                }
            } else {
                self.expr(v, scope);
            }
        }
        true
    }
}

fn defined_list(scope: &[String]) -> String {
    let mut names: Vec<&str> = scope.iter().map(String::as_str).collect();
    names.sort_unstable();
    names.dedup();
    let names: Vec<String> = names.iter().map(|n| format!("$${n}")).collect();
    format!(
        "use one of {} (or MongoDB's $$NOW, $$ROOT, ...) or bind it with $let",
        names.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(extra: &[&str]) -> BTreeSet<String> {
        ["since", "until", "campaign", "params"]
            .iter()
            .chain(extra)
            .map(|s| s.to_string())
            .collect()
    }

    fn problems(text: &str) -> Vec<String> {
        match parse(text, &vars(&["shown"])) {
            Ok(_) => vec![],
            Err(p) => p.into_iter().map(|p| p.message).collect(),
        }
    }

    fn one(text: &str) -> String {
        let p = problems(text);
        assert_eq!(p.len(), 1, "{p:?}");
        p[0].clone()
    }

    #[test]
    fn keeps_the_order_of_keys() {
        let stages = parse(
            r#"[{"$sort": {"z": -1, "a": 1, "m": 1}}, {"$project": {"b": 1, "a": 1}}]"#,
            &vars(&[]),
        )
        .unwrap();
        let keys: Vec<&String> = stages[0]["$sort"].as_object().unwrap().keys().collect();
        assert_eq!(keys, ["z", "a", "m"]);
    }

    #[test]
    fn refuses_writes_and_server_side_code_at_any_depth() {
        assert!(one(r#"[{"$out": "x"}]"#).starts_with("$out writes to the database"));
        assert!(one(r#"[{"$match": {}}, {"$merge": {"into": "x"}}]"#).starts_with("$merge writes"));
        assert!(one(r#"[{"$match": {"$where": "this.a > 1"}}]"#)
            .starts_with("$where runs server-side code"));
        let nested_lookup = r#"[{"$lookup": {"from": "u", "as": "x", "pipeline": [
            {"$match": {}}, {"$out": "stolen"}]}}]"#;
        assert!(one(nested_lookup).starts_with("$out writes"));
        let facet = r#"[{"$facet": {"a": [{"$match": {}}], "b": [{"$merge": {"into": "y"}}]}}]"#;
        assert!(one(facet).starts_with("$merge writes"));
        let union = r#"[{"$unionWith": {"coll": "u", "pipeline": [{"$out": "z"}]}}]"#;
        assert!(one(union).starts_with("$out writes"));
        let operator =
            r#"[{"$addFields": {"x": {"$function": {"body": "f", "args": [], "lang": "js"}}}}]"#;
        assert!(one(operator).starts_with("$function runs server-side code"));
        let group = r#"[{"$group": {"_id": null, "x": {"$accumulator": {}}}}]"#;
        assert!(one(group).starts_with("$accumulator runs server-side code"));
        let in_expr = r#"[{"$match": {"$expr": {"$gt": [{"$function": {}}, 1]}}}]"#;
        assert!(one(in_expr).starts_with("$function runs"));
        let deep = r#"[{"$facet": {"a": [{"$lookup": {"from": "u", "as": "x", "pipeline": [{"$project": {"v": {"$map": {"input": "$l", "in": {"$function": {}}}}}}]}}]}}]"#;
        assert!(one(deep).starts_with("$function runs"));
    }

    #[test]
    fn refuses_an_undefined_variable_and_names_those_defined() {
        let p = one(r#"[{"$match": {"$expr": {"$gte": ["$createdAt", "$$sinse"]}}}]"#);
        assert!(p.starts_with("$$sinse is not defined; use one of $$campaign, $$params, $$shown, $$since, $$until"), "{p}");
        // $$userIds is the data queries' alone.
        assert!(
            one(r#"[{"$match": {"$expr": {"$in": ["$_id", "$$userIds"]}}}]"#)
                .starts_with("$$userIds is not defined")
        );
        assert_eq!(
            parse(
                r#"[{"$match": {"$expr": {"$in": ["$_id", "$$userIds"]}}}]"#,
                &vars(&["userIds"])
            )
            .map(|_| ()),
            Ok(())
        );
    }

    #[test]
    fn accepts_variables_bound_inside_the_pipeline() {
        let ok = r#"[
          {"$match": {"$expr": {"$and": [{"$gte": ["$at", "$$since"]}, {"$lt": ["$at", "$$until"]}]}}},
          {"$project": {
             "names": {"$map": {"input": "$people", "as": "p", "in": "$$p.name"}},
             "ids": {"$map": {"input": "$people", "in": "$$this._id"}},
             "big": {"$filter": {"input": "$n", "as": "x", "cond": {"$gt": ["$$x", "$$shown"]}}},
             "sum": {"$reduce": {"input": "$n", "initialValue": 0, "in": {"$add": ["$$value", "$$this"]}}},
             "l": {"$let": {"vars": {"k": "$$params.shown"}, "in": {"$add": ["$$k", 1]}}},
             "lit": {"$literal": "$$notAVariable"},
             "now": "$$NOW", "root": "$$ROOT.x", "gone": "$$REMOVE",
             "c": "$$campaign"
          }},
          {"$lookup": {"from": "users", "let": {"uid": "$followerId"}, "as": "u", "pipeline": [
             {"$match": {"$expr": {"$eq": ["$_id", "$$uid"]}}},
             {"$match": {"$expr": {"$lt": ["$createdAt", "$$until"]}}}
          ]}},
          {"$redact": {"$cond": [{"$eq": ["$x", 1]}, "$$DESCEND", "$$PRUNE"]}},
          {"$match": {"note": "$$plain text in a query is a value"}},
          {"$sort": {"at": -1}}
        ]"#;
        assert_eq!(problems(ok), Vec::<String>::new());
    }

    #[test]
    fn scopes_end_where_they_end() {
        // $$p is bound in $map's `in` only; a $lookup's let inside its pipeline only.
        assert!(one(
            r#"[{"$project": {"a": {"$map": {"input": "$$p", "as": "p", "in": "$$p"}}}}]"#
        )
        .starts_with("$$p is not defined"));
        assert!(one(r#"[{"$lookup": {"from": "u", "as": "x", "let": {"k": "$a"}, "pipeline": []}}, {"$project": {"k": "$$k"}}]"#)
            .starts_with("$$k is not defined"));
        assert!(
            one(r#"[{"$project": {"a": {"$let": {"vars": {"k": "$$k"}, "in": "$$k"}}}}]"#)
                .starts_with("$$k is not defined")
        );
    }

    #[test]
    fn refuses_what_is_not_a_pipeline() {
        assert!(one(r#"{"$match": {}}"#).starts_with("not an array"));
        assert!(one(r#"[{"$match": {}, "$sort": {"a": 1}}]"#)
            .starts_with("stage 1 has 2 keys ($match, $sort)"));
        assert!(one(r#"[{"match": {}}]"#).starts_with("stage 1: \"match\" is not a stage"));
        assert!(one(r#"[1]"#).starts_with("stage 1 is not a document"));
        let p = parse("[\n{\"$match\": {}},\n{\"$sort\" {}}\n]", &vars(&[])).unwrap_err();
        assert_eq!(p[0].line, Some(3));
        assert!(
            p[0].message.starts_with("not JSON (expected `:`)"),
            "{}",
            p[0].message
        );
        assert!(one(r#"[{"$match": {"_id": {"$oid": "not hex"}}}]"#)
            .starts_with("not valid Extended JSON"));
    }

    #[test]
    fn reads_extended_json() {
        assert_eq!(
            problems(
                r#"[{"$match": {"_id": {"$oid": "64b7f0c2a1b2c3d4e5f60718"}, "at": {"$gte": {"$date": "2026-11-23T00:00:00Z"}}, "n": {"$numberLong": "5"}}}]"#
            ),
            Vec::<String>::new()
        );
    }
}
