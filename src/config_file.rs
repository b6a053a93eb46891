//! A [`Config`] read from a file or a string, in JSON or TOML:
//!
//! ```toml
//! max_tenants = 1024          # optional, like every table size
//! [[pools]]
//! name = "requests"
//! capacity = 1000
//! floor_percent = 5           # optional (default 5)
//! window_ms = 1000            # optional (default 1000)
//! [[pools]]
//! name = "flights"
//! per_worker = { quota = 0.25, min_tickets = 2 }
//! rates = false               # optional (default true): the tenants' rates skip it
//! [weights]
//! acme = 3
//! [[guaranteed]]              # seed 001's policy
//! name = "tokens"
//! ceiling = 100000
//! fairness_unit = "cost"      # required: "cost" or "requests"
//! reclaim_horizon_ms = 250    # optional (default 250)
//! idle_after_ms = 1000        # optional (default 1000), > the horizon
//! max_leases = 64             # optional
//! tenants = { acme = 3, globex = 1 }
//! ```
//!
//! `weights` and a guaranteed pool's `tenants` are each a map of names to weights, or,
//! as seed 001 writes its tenants, a list of `{ id = "acme", weight = 3 }`.
//!
//! Unknown keys are errors (a misspelt `capacty` must not silently become a default),
//! and so is a name given twice in `weights` or `tenants` (which JSON's objects would
//! otherwise settle silently, the last one winning); the result is validated like any
//! config. Every error is [`Error::InvalidConfig`] naming the file, the key where it
//! was found (`guaranteed[0].tenants`), what was wrong and where in the text.

use std::fmt;
use std::path::Path;

use serde::Deserialize;
use serde::de::{self, MapAccess, SeqAccess, Visitor};

use crate::config::{Config, DEFAULT_FLOOR_PERCENT, DEFAULT_WINDOW_MS, PerWorker, PoolConfig};
use crate::error::{Error, Result};

#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a config table (pools, guaranteed, weights, ...)"
)]
struct FileConfig {
    #[serde(default)]
    pools: Vec<FilePool>,
    #[serde(default)]
    guaranteed: Vec<FileGuaranteed>,
    max_tenants: Option<u32>,
    max_processes: Option<u32>,
    leases_per_process: Option<u32>,
    #[serde(default)]
    weights: Weights,
}

#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a pool table (name, capacity or per_worker, ...)"
)]
struct FilePool {
    name: String,
    capacity: Option<u32>,
    floor_percent: Option<u32>,
    window_ms: Option<u32>,
    per_worker: Option<FilePerWorker>,
    /// The residents pool: evict instead of refusing.
    #[serde(default)]
    evict: bool,
    evict_wait_ms: Option<u32>,
    /// Whether the tenants' rates apply to this pool's acquires.
    #[serde(default = "yes")]
    rates: bool,
}

fn yes() -> bool {
    true
}

#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a guaranteed pool table (name, ceiling, fairness_unit, tenants, ...)"
)]
struct FileGuaranteed {
    name: String,
    ceiling: u32,
    fairness_unit: Option<crate::guaranteed::FairnessUnit>,
    reclaim_horizon_ms: Option<u32>,
    idle_after_ms: Option<u32>,
    started_at_ms: Option<u64>,
    max_leases: Option<u32>,
    tenants: Weights,
}

/// Names with their weights, as a file gives them: a map (`{ acme = 3 }`) or a list of
/// `{ id, weight }` (seed 001's `tenants`). Every entry is kept, a name given twice
/// too, so that the config's validation names it (a JSON object's repeated key would
/// otherwise be settled silently by the last one); sorted by name, the order a map
/// gives, so that one config reads to one `Config` in either form.
#[derive(Default)]
struct Weights(Vec<(String, u32)>);

/// One entry of the list form.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a tenant { id, weight }")]
struct IdWeight {
    id: String,
    weight: u32,
}

impl<'de> Deserialize<'de> for Weights {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Vec<(String, u32)>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a map of names to weights, or a list of { id, weight }")
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                mut m: A,
            ) -> std::result::Result<Self::Value, A::Error> {
                let mut v = Vec::new();
                while let Some(entry) = m.next_entry::<String, u32>()? {
                    v.push(entry);
                }
                Ok(v)
            }
            fn visit_seq<A: SeqAccess<'de>>(
                self,
                mut s: A,
            ) -> std::result::Result<Self::Value, A::Error> {
                let mut v = Vec::new();
                while let Some(IdWeight { id, weight }) = s.next_element()? {
                    v.push((id, weight));
                }
                Ok(v)
            }
        }
        let mut v = d.deserialize_any(V)?;
        // Stable: a name given twice keeps both entries, side by side.
        v.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(Weights(v))
    }
}

#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a per_worker table (quota, min_tickets)"
)]
struct FilePerWorker {
    quota: f64,
    #[serde(default)]
    min_tickets: u32,
}

impl FileConfig {
    fn into_config(self) -> Result<Config> {
        let d = Config::default();
        let mut pools = Vec::with_capacity(self.pools.len());
        for p in self.pools {
            let pc = match (p.capacity, p.per_worker) {
                (Some(cap), None) => PoolConfig::new(&p.name, cap),
                (None, Some(w)) => PoolConfig {
                    per_worker: Some(PerWorker::new(w.quota, w.min_tickets)),
                    ..PoolConfig::new(&p.name, 0)
                },
                (Some(_), Some(_)) => {
                    return Err(Error::InvalidConfig(format!(
                        "pool {:?} has both a capacity and per_worker; give one",
                        p.name
                    )));
                }
                (None, None) => {
                    return Err(Error::InvalidConfig(format!(
                        "pool {:?} needs a capacity or per_worker",
                        p.name
                    )));
                }
            };
            if p.evict_wait_ms.is_some() && !p.evict {
                // Without `evict` the key would do nothing: most likely `evict` was
                // forgotten, and the pool would refuse where eviction was meant.
                return Err(Error::InvalidConfig(format!(
                    "pool {:?}: evict_wait_ms applies only to a pool that evicts; set \
                     evict = true (the residents pool) or leave evict_wait_ms out",
                    p.name
                )));
            }
            pools.push(PoolConfig {
                floor_percent: p.floor_percent.unwrap_or(DEFAULT_FLOOR_PERCENT),
                window_ms: p.window_ms.unwrap_or(DEFAULT_WINDOW_MS),
                evict: p.evict,
                rates: p.rates,
                evict_wait_ms: p
                    .evict_wait_ms
                    .unwrap_or(crate::config::DEFAULT_EVICT_WAIT_MS),
                ..pc
            });
        }
        let cfg = Config {
            pools,
            max_tenants: self.max_tenants.unwrap_or(d.max_tenants),
            max_processes: self.max_processes.unwrap_or(d.max_processes),
            leases_per_process: self.leases_per_process.unwrap_or(d.leases_per_process),
            weights: self.weights.0,
            guaranteed: self
                .guaranteed
                .into_iter()
                .map(|g| {
                    let mut c = crate::guaranteed::GuaranteedConfig::new(&g.name, g.ceiling);
                    c.fairness_unit = g.fairness_unit;
                    c.tenants = g.tenants.0;
                    c.reclaim_horizon_ms = g.reclaim_horizon_ms.unwrap_or(c.reclaim_horizon_ms);
                    c.idle_after_ms = g.idle_after_ms.unwrap_or(c.idle_after_ms);
                    c.started_at_ms = g.started_at_ms.unwrap_or(0);
                    c.max_leases = g.max_leases.unwrap_or(c.max_leases);
                    c
                })
                .collect(),
        };
        cfg.validate()?;
        Ok(cfg)
    }
}

impl Config {
    /// Parses and validates a config in JSON.
    pub fn from_json(text: &str) -> Result<Config> {
        let bad =
            |e: &serde_json::Error, path: &str| Error::InvalidConfig(format!("JSON: {path}{e}"));
        let mut de = serde_json::Deserializer::from_str(text);
        let file: FileConfig = serde_path_to_error::deserialize(&mut de)
            .map_err(|e| bad(e.inner(), &key_of(e.path())))?;
        // As `serde_json::from_str`: nothing but white space after the value.
        de.end().map_err(|e| bad(&e, ""))?;
        file.into_config()
    }

    /// Parses and validates a config in TOML.
    pub fn from_toml(text: &str) -> Result<Config> {
        let file: FileConfig = serde_path_to_error::deserialize(toml::Deserializer::new(text))
            .map_err(|e| {
                let (key, e) = (key_of(e.path()), e.inner());
                Error::InvalidConfig(format!("TOML: {key}{}", toml_error(e, text)))
            })?;
        file.into_config()
    }

    /// Reads a config file: TOML if its name ends in `.toml`, JSON if in `.json` (in
    /// any case), and otherwise (`fairshm.conf`) JSON when its text starts with `{`,
    /// as a JSON config does and a TOML one cannot, else TOML. A byte-order mark at its
    /// start (which some editors write) is skipped.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Config> {
        let path = path.as_ref();
        let read = std::fs::read_to_string(path).map_err(|e| {
            Error::InvalidConfig(format!("cannot read config file {}: {e}", path.display()))
        })?;
        let text = read.strip_prefix('\u{feff}').unwrap_or(&read);
        let ext = path
            .extension()
            .map(|x| x.to_string_lossy().to_ascii_lowercase());
        let toml = match ext.as_deref() {
            Some("toml") => true,
            Some("json") => false,
            _ => !text.trim_start().starts_with('{'),
        };
        let parsed = if toml {
            Config::from_toml(text)
        } else {
            Config::from_json(text)
        };
        parsed.map_err(|e| match e {
            Error::InvalidConfig(what) => {
                Error::InvalidConfig(format!("config file {}: {what}", path.display()))
            }
            other => other,
        })
    }
}

/// The key an error was found at, as a prefix of its message (`guaranteed[0].tenants:
/// `); none for the file as a whole, or for a syntax error, found before any key.
fn key_of(path: &serde_path_to_error::Path) -> String {
    let key = path.to_string();
    if key == "." || key.is_empty() {
        String::new()
    } else {
        format!("{key}: ")
    }
}

/// A TOML error in one line, with where it is as JSON's errors say it ("... at line 3
/// column 12"): the crate's `Display` spreads it over several lines with a drawing of
/// the text, and its message alone does not say where.
fn toml_error(e: &toml::de::Error, text: &str) -> String {
    let msg = e.message().trim_end().replace('\n', "; ");
    match e.span() {
        Some(span) => {
            // The span is the crate's; cut at a character boundary at or before it.
            let start = (0..=span.start.min(text.len()))
                .rev()
                .find(|&i| text.is_char_boundary(i))
                .unwrap_or(0);
            let before = &text[..start];
            let line = before.matches('\n').count() + 1;
            let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
            format!("{msg} at line {line} column {column}")
        }
        None => msg,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toml_and_json_read_to_the_same_config() {
        let toml = r#"
            max_tenants = 64
            [[pools]]
            name = "requests"
            capacity = 100
            floor_percent = 10
            [[pools]]
            name = "flights"
            per_worker = { quota = 0.25, min_tickets = 2 }
            [weights]
            acme = 3
        "#;
        let json = r#"{"max_tenants": 64,
            "pools": [{"name": "requests", "capacity": 100, "floor_percent": 10},
                      {"name": "flights", "per_worker": {"quota": 0.25, "min_tickets": 2}}],
            "weights": {"acme": 3}}"#;
        let a = Config::from_toml(toml).unwrap();
        let b = Config::from_json(json).unwrap();
        assert_eq!(a, b);
        let mut want = Config::with_pools(vec![
            PoolConfig::new("requests", 100).floor_percent(10),
            PoolConfig::per_worker("flights", 0.25, 2),
        ])
        .weight("acme", 3);
        want.max_tenants = 64;
        assert_eq!(a, want);
    }

    /// What Python's `json.dumps(2 / 3)` and Ruby's `(2.0 / 3).to_json` write reads
    /// back to the same double, kept exactly: 3 workers get Semian's 2 tickets.
    #[test]
    fn a_quota_of_many_decimals_reads_exactly() {
        let c = Config::from_json(
            r#"{"pools": [{"name": "f", "per_worker": {"quota": 0.6666666666666666}}]}"#,
        )
        .unwrap();
        let pw = c.pools[0].per_worker.unwrap();
        assert_eq!(pw.quota(), 2.0 / 3.0);
        assert_eq!(pw.tickets(3), 2);
        assert_eq!(Config::decode(&c.encode()).unwrap(), c);
    }

    #[test]
    fn an_evict_pool_reads_and_round_trips() {
        let c = Config::from_toml(
            r#"
            [[pools]]
            name = "residents"
            capacity = 8
            evict = true
            evict_wait_ms = 250
            [[pools]]
            name = "requests"
            capacity = 8
            "#,
        )
        .unwrap();
        assert!(c.pools[0].evict && !c.pools[1].evict);
        assert_eq!(c.pools[0].evict_wait_ms, 250);
        assert_eq!(Config::decode(&c.encode()).unwrap(), c);
        assert!(
            c.geometry().residents > 0,
            "an evict pool has resident records"
        );
        let zero = Config::from_toml(
            "[[pools]]\nname = \"r\"\ncapacity = 1\nevict = true\nevict_wait_ms = 0\n",
        )
        .unwrap_err()
        .to_string();
        assert!(zero.contains("evict_wait_ms"), "{zero}");
        // The wait without `evict` does nothing: an error, not a pool that refuses.
        let forgot =
            Config::from_toml("[[pools]]\nname = \"r\"\ncapacity = 1\nevict_wait_ms = 500\n")
                .unwrap_err();
        assert!(matches!(forgot, Error::InvalidConfig(_)), "{forgot:?}");
        assert!(forgot.to_string().contains("evict = true"), "{forgot}");
        let json = Config::from_json(
            r#"{"pools": [{"name": "r", "capacity": 1, "evict": false, "evict_wait_ms": 5}]}"#,
        )
        .unwrap_err();
        assert!(
            json.to_string().contains("evict_wait_ms applies only"),
            "{json}"
        );
        // A pool that refuses keeps no eviction wait: it reads back as the default.
        let mut plain = Config::with_pools(vec![crate::PoolConfig::new("p", 1)]);
        plain.pools[0].evict_wait_ms = 7;
        let back = Config::decode(&plain.encode()).unwrap();
        assert_eq!(back.diff(&plain), None);
        assert_eq!(plain.geometry().residents, 0);
    }

    /// Where an error is, by key, not only by line and column: a Python or Ruby config
    /// is a dict written as JSON on one line, where a column says little.
    #[test]
    fn errors_name_the_key_they_are_at() {
        let j = Config::from_json(
            r#"{"guaranteed": [{"name": "c", "ceiling": "100", "fairness_unit": "cost",
                "tenants": {"a": 1}}]}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(
            j.starts_with("invalid config: JSON: guaranteed[0].ceiling: invalid type: string"),
            "{j}"
        );
        assert!(j.contains("at line 1 column"), "{j}");
        let t = Config::from_toml(
            "[[pools]]\nname = \"r\"\n[[pools]]\nname = \"s\"\ncapacity = \"ten\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(t.contains("TOML: pools[1].capacity: invalid type"), "{t}");
        assert!(t.contains("at line 5 column 12"), "{t}");
        let inner =
            Config::from_json(r#"{"pools": [{"name": "r", "per_worker": {"quota": "half"}}]}"#)
                .unwrap_err()
                .to_string();
        assert!(
            inner.contains("pools[0].per_worker.quota: invalid type"),
            "{inner}"
        );
        // A syntax error is named by where the reader was.
        let syntax = Config::from_json("{\"pools\": [}").unwrap_err().to_string();
        assert!(
            syntax.contains("JSON: pools[0]: expected value at line 1 column 12"),
            "{syntax}"
        );
        // A file that is not a table has no key to name, and says what was expected in
        // the file's words, not the reader's type names.
        let list = Config::from_json("3").unwrap_err().to_string();
        assert_eq!(
            list,
            "invalid config: JSON: invalid type: integer `3`, expected a config table (pools, guaranteed, weights, ...) at line 1 column 1"
        );
        let pool = Config::from_json(r#"{"pools": [3]}"#)
            .unwrap_err()
            .to_string();
        assert!(pool.contains("pools[0]: invalid type: integer `3`, expected a pool table (name, capacity or per_worker, ...)"), "{pool}");
        // Nothing may follow the config, as with `serde_json::from_str`.
        let trailing = Config::from_json("{} x").unwrap_err().to_string();
        assert!(trailing.contains("trailing characters"), "{trailing}");
    }

    /// Seed 001 writes its tenants as a list of `{ id, weight }`: read as the map is.
    #[test]
    fn seed_001s_list_of_tenants_reads_as_the_map() {
        let map = r#"{"guaranteed": [{"name": "c", "ceiling": 100, "fairness_unit": "cost",
                      "tenants": {"globex": 1, "acme": 3}}], "weights": {"x": 2}}"#;
        let list = r#"{"guaranteed": [{"name": "c", "ceiling": 100, "fairness_unit": "cost",
                       "tenants": [{"id": "acme", "weight": 3}, {"id": "globex", "weight": 1}]}],
                       "weights": [{"id": "x", "weight": 2}]}"#;
        let toml = r#"
            weights = [{ id = "x", weight = 2 }]
            [[guaranteed]]
            name = "c"
            ceiling = 100
            fairness_unit = "cost"
            tenants = [{ id = "globex", weight = 1 }, { id = "acme", weight = 3 }]
        "#;
        let a = Config::from_json(map).unwrap();
        assert_eq!(
            a.guaranteed[0].tenants,
            vec![("acme".into(), 3), ("globex".into(), 1)]
        );
        assert_eq!(a.weights, vec![("x".into(), 2)]);
        assert_eq!(Config::from_json(list).unwrap(), a);
        assert_eq!(Config::from_toml(toml).unwrap(), a);
        // TOML's own way of writing a list of tables reads the same.
        let tables = r#"
            [[weights]]
            id = "x"
            weight = 2
            [[guaranteed]]
            name = "c"
            ceiling = 100
            fairness_unit = "cost"
            [[guaranteed.tenants]]
            id = "acme"
            weight = 3
            [[guaranteed.tenants]]
            id = "globex"
            weight = 1
        "#;
        assert_eq!(Config::from_toml(tables).unwrap(), a);
        let no_weight = Config::from_json(
            r#"{"guaranteed": [{"name": "c", "ceiling": 100, "fairness_unit": "cost",
                "tenants": [{"id": "a", "weight": 1}, {"id": "b"}]}]}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(
            no_weight.contains("guaranteed[0].tenants[1]: missing field `weight`"),
            "{no_weight}"
        );
        let neither = Config::from_json(r#"{"weights": 3}"#)
            .unwrap_err()
            .to_string();
        assert!(neither.contains("weights: invalid type: integer `3`, expected a map of names to weights, or a list of { id, weight }"), "{neither}");
    }

    /// A JSON object that names a tenant twice is an error naming it, as in TOML, not
    /// the last weight silently.
    #[test]
    fn a_name_given_twice_is_an_error_not_the_last_one() {
        let w = Config::from_json(
            r#"{"pools": [{"name": "r", "capacity": 4}], "weights": {"acme": 3, "acme": 1}}"#,
        )
        .unwrap_err();
        assert!(matches!(w, Error::InvalidConfig(_)), "{w:?}");
        assert!(
            w.to_string().contains(r#"tenant "acme" is weighted twice"#),
            "{w}"
        );
        let g = |tenants: &str| {
            Config::from_json(&format!(
                r#"{{"guaranteed": [{{"name": "c", "ceiling": 10, "fairness_unit": "cost",
                    "tenants": {tenants}}}]}}"#
            ))
            .unwrap_err()
            .to_string()
        };
        for tenants in [
            r#"{"a": 1, "b": 1, "a": 2}"#,
            r#"[{"id": "a", "weight": 1}, {"id": "a", "weight": 1}]"#,
        ] {
            let e = g(tenants);
            assert!(e.contains(r#"tenant "a" is named twice"#), "{tenants}: {e}");
        }
    }

    #[test]
    fn errors_name_what_is_wrong() {
        let e = |s: &str| Config::from_toml(s).unwrap_err().to_string();
        assert!(
            e("[[pools]]\nname = \"r\"\ncapacty = 5").contains("capacty"),
            "{}",
            e("[[pools]]\nname = \"r\"\ncapacty = 5")
        );
        assert!(e("[[pools]]\nname = \"r\"").contains("needs a capacity"));
        // A type error says where it is, as JSON's do.
        let ten = e("[[pools]]\nname = \"r\"\ncapacity = \"ten\"\n");
        assert!(ten.contains("expected u32 at line 3 column 12"), "{ten}");
        assert!(!ten.contains('\n'), "one line: {ten}");
        let header = e("[[pools]\n");
        assert!(
            header.contains("at line 1 column 8") && !header.contains('\n'),
            "{header}"
        );
        assert!(e("[[pools]]\nname = \"r\"\ncapacity = 0").contains("capacity 0"));
        let j = Config::from_json("{\"pools\": 3}").unwrap_err();
        assert!(matches!(j, Error::InvalidConfig(_)), "{j}");
        let g = "[[guaranteed]]\nname = \"t\"\nceiling = 10\ntenants = { a = 1 }";
        assert!(e(g).contains("fairness_unit is required"), "{}", e(g));
        let g2 =
            format!("{g}\nfairness_unit = \"cost\"\nidle_after_ms = 10\nreclaim_horizon_ms = 10");
        assert!(e(&g2).contains("strictly greater"), "{}", e(&g2));
        let ok = Config::from_toml(&format!("{g}\nfairness_unit = \"requests\"")).unwrap();
        assert_eq!(
            ok.guaranteed[0].fairness_unit,
            Some(crate::guaranteed::FairnessUnit::Requests)
        );
        assert!(ok.pools.is_empty());
        let f = Config::from_file("/nonexistent/fairshm.toml").unwrap_err();
        assert!(f.to_string().contains("/nonexistent/fairshm.toml"), "{f}");
    }

    /// The format follows the name's extension in any case, and the text where the
    /// name has none of the two: a TOML `fairshm.conf` was read as JSON ("expected
    /// value at line 1 column 1").
    #[test]
    fn a_config_files_format_follows_its_extension_or_its_text() {
        let dir = std::env::temp_dir().join(format!("fairshm-cfgfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let toml = "[[pools]]\nname = \"requests\"\ncapacity = 8\n";
        let json = " {\"pools\": [{\"name\": \"requests\", \"capacity\": 8}]}";
        let want = Config::with_pools(vec![PoolConfig::new("requests", 8)]);
        let read = |name: &str, text: &str| {
            let path = dir.join(name);
            std::fs::write(&path, text).unwrap();
            Config::from_file(&path)
        };
        for (name, text) in [
            ("a.toml", toml),
            ("b.TOML", toml),
            ("c.conf", toml),
            ("d", toml),
            ("e.json", json),
            ("f.JSON", json),
            ("g.conf", json),
            // With the byte-order mark an editor may write, which is not config text.
            ("j.toml", &format!("\u{feff}{toml}")),
            ("k.json", &format!("\u{feff}{json}")),
            ("l.conf", &format!("\u{feff}{json}")),
            ("m", &format!("\u{feff}{toml}")),
        ] {
            assert_eq!(read(name, text).unwrap(), want, "{name}");
        }
        let e = read("h.json", toml).unwrap_err().to_string();
        assert!(e.contains("h.json: JSON: "), "{e}");
        let e = read("i.toml", json).unwrap_err().to_string();
        assert!(e.contains("i.toml: TOML: "), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
