//! `shm-layout.md` and `src/layout.rs` must agree, field by field.
use std::collections::BTreeMap;

use fairshm::Config;
use fairshm::layout::{field_table, record_size};

/// `record -> [(field, offset, size)]` from the document's `### \`Record\`` tables.
fn doc_fields() -> BTreeMap<String, Vec<(String, usize, usize)>> {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/shm-layout.md")).unwrap();
    let mut out: BTreeMap<String, Vec<(String, usize, usize)>> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in doc.lines() {
        if let Some(h) = line.strip_prefix("### ") {
            current = h
                .strip_prefix('`')
                .and_then(|h| h.strip_suffix('`'))
                .map(str::to_owned);
            continue;
        }
        let Some(rec) = &current else { continue };
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() < 5 {
            continue;
        }
        let (Ok(off), Ok(size)) = (cells[1].parse(), cells[2].parse()) else {
            continue;
        };
        out.entry(rec.clone())
            .or_default()
            .push((cells[3].to_owned(), off, size));
    }
    out
}

#[test]
fn every_field_is_documented_at_its_offset_and_size() {
    let doc = doc_fields();
    let code = field_table();
    let mut from_code: BTreeMap<String, Vec<(String, usize, usize)>> = BTreeMap::new();
    for (rec, field, off, size) in &code {
        from_code
            .entry(rec.to_string())
            .or_default()
            .push((field.to_string(), *off, *size));
    }
    assert_eq!(
        doc.keys().collect::<Vec<_>>(),
        from_code.keys().collect::<Vec<_>>(),
        "documented records"
    );
    for (rec, fields) in &from_code {
        assert_eq!(
            &doc[rec], fields,
            "record {rec}: document (left) vs code (right)"
        );
        let end = fields.last().map(|(_, o, s)| o + s).unwrap();
        let size = record_size(rec).expect("a record of the layout");
        assert_eq!(end, size, "record {rec} does not fill its {size} bytes");
        for w in fields.windows(2) {
            assert_eq!(
                w[0].1 + w[0].2,
                w[1].1,
                "{rec}: gap or overlap before {}",
                w[1].0
            );
        }
    }
}

#[test]
fn the_documented_layout_version_is_the_real_one() {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/shm-layout.md")).unwrap();
    let v = fairshm::layout::LAYOUT_VERSION;
    let title = doc.lines().next().unwrap_or_default();
    assert!(
        title.ends_with(&format!("(version {v})")),
        "the title names the layout version {v}: {title}"
    );
    // The header table's `version` row states the value the creator writes.
    let row = doc
        .lines()
        .find(|l| l.starts_with("| 8 | 4 | version |"))
        .expect("the header's version row");
    assert!(
        row.contains(&format!("layout version, {v} ")),
        "the version row names {v}: {row}"
    );
}

#[test]
fn the_documented_default_size_is_the_real_one() {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/shm-layout.md")).unwrap();
    let size = Config::default().geometry().total_size;
    let text = doc
        .split("makes a segment of")
        .nth(1)
        .expect("the default size sentence");
    let documented: usize = text
        .split_whitespace()
        .next()
        .unwrap()
        .replace(',', "")
        .parse()
        .unwrap();
    assert_eq!(documented, size);
}

#[test]
fn the_guaranteed_block_is_documented_as_the_code_lays_it_out() {
    use fairshm::guaranteed::{HEAD_WORDS, words};
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/shm-layout.md")).unwrap();
    let sentence = doc
        .split("A block holds ")
        .nth(1)
        .expect("the block sentence")
        .split(" per slice")
        .next()
        .unwrap();
    let numbers: Vec<usize> = sentence
        .split_whitespace()
        .filter_map(|w| w.trim_matches(',').parse().ok())
        .collect();
    assert_eq!(
        numbers,
        vec![
            words::HEADER_WORDS,
            words::TENANT_WORDS,
            words::LEASE_WORDS,
            words::SLICE_WORDS
        ],
        "{sentence}"
    );
    assert!(doc.contains(&format!("a head record of {HEAD_WORDS} words")));
    // The documented formula is the real size: two tenants, 64 leases, 130 slices.
    assert_eq!(
        words::block_words(2, 64, 130),
        (8 + 24 + 384 + 260usize).div_ceil(16) * 16
    );
    // And the region it makes: heads and blocks, after the rates, 128-aligned.
    let cfg = Config {
        max_processes: 3,
        ..Config::with_pools(vec![fairshm::PoolConfig::new("requests", 10)])
    }
    .guaranteed(
        fairshm::GuaranteedConfig::new("g", 10)
            .unit(fairshm::FairnessUnit::Cost)
            .tenant("a", 1)
            .tenant("b", 1),
    );
    let geo = cfg.geometry();
    let per_pool = HEAD_WORDS + 2 * 3 * words::block_words(2, 64, 130);
    assert_eq!(geo.guaranteed_off % 128, 0);
    assert_eq!(geo.total_size, geo.guaranteed_off + 8 * per_pool);
    // An evict pool adds the residents region at the end: a record per lease.
    let mut cfg = cfg;
    cfg.pools[0].evict = true;
    let geo2 = cfg.geometry();
    assert_eq!(geo2.residents_off, geo.total_size.div_ceil(64) * 64);
    assert_eq!(geo2.total_size, geo2.residents_off + 64 * geo2.leases());
}
