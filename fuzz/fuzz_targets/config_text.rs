//! Config files, JSON against TOML: the input drives a generator of configs (pools
//! with every key present, missing or wrong, weights and guaranteed tenants as a map
//! or as seed 001's list, names given twice, table sizes at and past their bounds,
//! unknown keys), each written both ways. The two readings must agree: both an
//! error, or the same `Config`. One that reads must validate, survive its encoding
//! into a segment's config block unchanged (`diff` finds nothing), and give a
//! geometry without overflowing. A panic anywhere is a finding.
#![no_main]

use fairshm::Config;
use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value, json};

/// The input as a stream of choices; an exhausted input chooses 0.
struct Choices<'a>(&'a [u8]);

impl Choices<'_> {
    fn byte(&mut self) -> u8 {
        let (b, rest) = self.0.split_first().map_or((0, &[][..]), |(b, r)| (*b, r));
        self.0 = rest;
        b
    }
    fn pick<T: Clone>(&mut self, from: &[T]) -> T {
        from[self.byte() as usize % from.len()].clone()
    }
    fn maybe(&mut self) -> bool {
        self.byte() % 2 == 1
    }
}

const NAMES: &[&str] = &["requests", "flights", "a", "b", "acme", "", "x\"y", "é"];
const U32S: &[i64] = &[
    0,
    1,
    2,
    3,
    7,
    100,
    1000,
    65_535,
    65_536,
    4_294_967_295,
    4_294_967_296,
    -1,
];
const QUOTAS: &[f64] = &[
    0.0,
    1e-7,
    0.25,
    0.5,
    0.51,
    0.6666666666666666,
    1.0,
    1.5,
    -0.5,
];

fn number(c: &mut Choices) -> Value {
    json!(c.pick(U32S))
}

/// Names with weights: absent, a map or a list of `{ id, weight }`.
fn weights(c: &mut Choices) -> Option<Value> {
    let n = c.byte() % 4;
    let entries: Vec<(String, Value)> = (0..n)
        .map(|_| (c.pick(NAMES).to_string(), number(c)))
        .collect();
    match c.byte() % 3 {
        0 => None,
        1 => Some(Value::Array(
            entries
                .into_iter()
                .map(|(id, weight)| json!({"id": id, "weight": weight}))
                .collect(),
        )),
        // A map: a name given twice is kept twice in the text (see `render`).
        _ => Some(Value::Array(
            entries.into_iter().map(|(k, v)| json!([k, v])).collect(),
        ))
        .map(|v| json!({ "__map": v })),
    }
}

fn pool(c: &mut Choices) -> Value {
    let mut p = Map::new();
    p.insert("name".into(), json!(c.pick(NAMES)));
    if c.maybe() {
        p.insert("capacity".into(), number(c));
    }
    if c.maybe() {
        p.insert(
            "per_worker".into(),
            json!({"quota": c.pick(QUOTAS), "min_tickets": number(c)}),
        );
    }
    for key in ["floor_percent", "window_ms", "evict_wait_ms"] {
        if c.byte() % 4 == 1 {
            p.insert(key.into(), number(c));
        }
    }
    for key in ["evict", "rates"] {
        if c.byte() % 4 == 1 {
            p.insert(key.into(), json!(c.maybe()));
        }
    }
    if c.byte() % 16 == 1 {
        p.insert("capacty".into(), json!(5));
    }
    Value::Object(p)
}

fn guaranteed(c: &mut Choices) -> Value {
    let mut g = Map::new();
    g.insert("name".into(), json!(c.pick(NAMES)));
    if c.byte() % 8 != 1 {
        g.insert("ceiling".into(), number(c));
    }
    match c.byte() % 4 {
        0 => {}
        1 => drop(g.insert("fairness_unit".into(), json!("requests"))),
        2 => drop(g.insert("fairness_unit".into(), json!("cost"))),
        _ => drop(g.insert("fairness_unit".into(), json!("tokens"))),
    }
    for key in [
        "reclaim_horizon_ms",
        "idle_after_ms",
        "started_at_ms",
        "max_leases",
    ] {
        if c.maybe() {
            g.insert(key.into(), number(c));
        }
    }
    if let Some(t) = weights(c) {
        g.insert("tenants".into(), t);
    }
    Value::Object(g)
}

fn config(c: &mut Choices) -> Value {
    let mut top = Map::new();
    for key in ["max_tenants", "max_processes", "leases_per_process"] {
        if c.byte() % 4 == 1 {
            top.insert(key.into(), number(c));
        }
    }
    if let Some(w) = weights(c) {
        top.insert("weights".into(), w);
    }
    let pools: Vec<Value> = (0..c.byte() % 4).map(|_| pool(c)).collect();
    if !pools.is_empty() || c.maybe() {
        top.insert("pools".into(), Value::Array(pools));
    }
    let g: Vec<Value> = (0..c.byte() % 3).map(|_| guaranteed(c)).collect();
    if !g.is_empty() {
        top.insert("guaranteed".into(), Value::Array(g));
    }
    Value::Object(top)
}

/// How a value is written inline: JSON (`{"k": v}`) or TOML (`{ "k" = v }`, keys
/// quoted: names may be empty or odd).
#[derive(Clone, Copy)]
enum Syntax {
    Json,
    Toml,
}

/// A value inline in `syntax`, a `{"__map": [[k, v], ...]}` as a table with those keys
/// in that order (repeats included).
fn inline(v: &Value, syntax: Syntax) -> String {
    let (assign, open, close) = match syntax {
        Syntax::Json => (": ", "{", "}"),
        Syntax::Toml => (" = ", "{ ", " }"),
    };
    let table = |pairs: Vec<(String, &Value)>| {
        let inner: Vec<String> = pairs
            .into_iter()
            .map(|(k, x)| format!("{k}{assign}{}", inline(x, syntax)))
            .collect();
        format!("{open}{}{close}", inner.join(", "))
    };
    match v {
        Value::Object(m) if m.contains_key("__map") => table(
            m["__map"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| (p[0].to_string(), &p[1]))
                .collect(),
        ),
        Value::Object(m) => table(
            m.iter()
                .map(|(k, x)| (Value::from(k.as_str()).to_string(), x))
                .collect(),
        ),
        Value::Array(a) => {
            let inner: Vec<String> = a.iter().map(|x| inline(x, syntax)).collect();
            format!("[{}]", inner.join(", "))
        }
        Value::Number(n) if n.is_f64() => float(n.as_f64().unwrap()),
        other => other.to_string(),
    }
}

/// A float both formats read back as the same double, always with a point or an
/// exponent (so TOML reads a float, not an integer).
fn float(x: f64) -> String {
    let s = format!("{x:?}");
    if s.contains(['.', 'e', 'E']) {
        s
    } else {
        format!("{s}.0")
    }
}

/// The config as a TOML file: its keys and inline values first, then a `[[pools]]` or
/// `[[guaranteed]]` table for each entry of those lists.
fn toml_text(v: &Value) -> String {
    let top = v.as_object().unwrap();
    let mut out = String::new();
    for (k, x) in top {
        if !(k == "pools" || k == "guaranteed") || x.as_array().is_some_and(|a| a.is_empty()) {
            out += &format!(
                "{} = {}\n",
                Value::from(k.as_str()),
                inline(x, Syntax::Toml)
            );
        }
    }
    for list in ["pools", "guaranteed"] {
        for item in top
            .get(list)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            out += &format!("[[{list}]]\n");
            for (k, x) in item.as_object().unwrap() {
                out += &format!(
                    "{} = {}\n",
                    Value::from(k.as_str()),
                    inline(x, Syntax::Toml)
                );
            }
        }
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let v = config(&mut Choices(data));
    let (json, toml) = (inline(&v, Syntax::Json), toml_text(&v));
    let (a, b) = (Config::from_json(&json), Config::from_toml(&toml));
    match (&a, &b) {
        (Ok(a), Ok(b)) => assert_eq!(a, b, "JSON and TOML read differently:\n{json}\n{toml}"),
        (Err(_), Err(_)) => return,
        _ => panic!("one reads, the other not: {a:?} / {b:?}\n{json}\n{toml}"),
    }
    let c = a.unwrap();
    c.validate().expect("a config read from a file validates");
    let back = Config::decode(&c.encode()).expect("its config block decodes");
    assert_eq!(back.diff(&c), None, "through the config block:\n{json}");
    let g = c.geometry();
    assert!(g.total_size > 0);
});
