//! The text of `lsfs stats` (without `--json`): one section per part of
//! the mount, aligned `key: value` lines, sizes in MiB.

use serde_json::Value;

const BLOCK: u64 = lsfs_core::layout::BLOCK_BYTES as u64;

/// Bytes in the largest binary unit that keeps them at least 1.
pub(crate) fn size(bytes: u64) -> String {
    let b = bytes as f64;
    match bytes {
        0..=1023 => format!("{bytes} B"),
        1024..=0xF_FFFF => format!("{:.1} KiB", b / 1024.0),
        0x10_0000..=0x3FFF_FFFF => format!("{:.1} MiB", b / (1u64 << 20) as f64),
        _ => format!("{:.1} GiB", b / (1u64 << 30) as f64),
    }
}

fn blocks(n: u64) -> String {
    format!("{n} blocks ({})", size(n * BLOCK))
}

fn percent(part: u64, whole: u64) -> String {
    if whole == 0 {
        "-".to_string()
    } else {
        format!("{:.1} %", part as f64 * 100.0 / whole as f64)
    }
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

/// A scalar as text; a map of counters as `name n, name n`.
fn plain(key: &str, v: &Value) -> String {
    match v {
        Value::Null => "-".to_string(),
        Value::String(s) => s.clone(),
        Value::Number(n) if key.ends_with("bytes") => {
            let b = n.as_u64().unwrap_or(0);
            format!("{b} ({})", size(b))
        }
        Value::Object(m) if m.is_empty() => "-".to_string(),
        Value::Object(m) => m
            .iter()
            .map(|(k, v)| format!("{k} {}", plain(k, v)))
            .collect::<Vec<_>>()
            .join(", "),
        other => other.to_string(),
    }
}

/// Every field of a JSON object, as `plain` shows it.
fn fields(v: &Value) -> Vec<(String, String)> {
    v.as_object()
        .into_iter()
        .flatten()
        .map(|(k, x)| (k.replace('_', " "), plain(k, x)))
        .collect()
}

/// The text `lsfs stats` prints for the JSON `lsfs stats --json` prints.
pub fn stats_text(s: &Value) -> String {
    let mut sections: Vec<(&str, Vec<(String, String)>)> = Vec::new();
    let row = |k: &str, v: String| (k.to_string(), v);

    let mut fs = vec![
        row("blocks used", blocks(u(&s["blocks_used"]))),
        row("inodes used", u(&s["inodes_used"]).to_string()),
    ];
    if let Some(c) = s["compress"].as_str() {
        fs.push(row("compression", c.to_string()));
    }
    if let Some(r) = s["read_only_reason"].as_str() {
        fs.push(row("read-only because", r.to_string()));
    }
    if let Some(n) = s["view_follows"].as_u64().filter(|&n| n > 0) {
        fs.push(row(
            "followed the writer",
            format!("{n} times (opened the store again for blocks its cleaner moved)"),
        ));
    }
    if let Some(n) = s["view_moves"].as_u64().filter(|&n| n > 0) {
        fs.push(row(
            "moved on",
            format!("{n} times (to the writer's newer checkpoints)"),
        ));
    }
    sections.push(("file system", fs));

    let c = &s["cache"];
    let (hits, misses) = (u(&c["hits"]), u(&c["misses"]));
    sections.push((
        "cache",
        vec![
            row("capacity", blocks(u(&c["capacity_blocks"]))),
            row(
                "resident",
                format!(
                    "{} blocks ({}, {} full)",
                    u(&c["resident_blocks"]),
                    size(u(&c["resident_blocks"]) * BLOCK),
                    percent(u(&c["resident_blocks"]), u(&c["capacity_blocks"]))
                ),
            ),
            row("dirty", blocks(u(&c["dirty_blocks"]))),
            row(
                "hit rate",
                format!(
                    "{} ({hits} hits, {misses} misses)",
                    percent(hits, hits + misses)
                ),
            ),
        ],
    ));

    let cp = &s["checkpoint"];
    let mut rows = vec![
        row("current", u(&cp["current"]).to_string()),
        row("kept", u(&cp["count"]).to_string()),
    ];
    if let Some(n) = cp["shown"].as_u64() {
        rows.insert(0, row("shown", format!("{n} (this mount is a view of it)")));
    }
    sections.push(("checkpoint", rows));

    let d = &s["device"];
    sections.push((
        "device",
        vec![
            row(
                "reads",
                format!("{} ({})", u(&d["reads"]), size(u(&d["read_bytes"]))),
            ),
            row(
                "writes",
                format!("{} ({})", u(&d["writes"]), size(u(&d["write_bytes"]))),
            ),
            row("flushes", u(&d["flushes"]).to_string()),
            row(
                "discards",
                format!("{} ({})", u(&d["discards"]), size(u(&d["discard_bytes"]))),
            ),
            row(
                "holes filled ahead",
                format!("{} ({})", u(&d["fills"]), size(u(&d["fill_bytes"]))),
            ),
        ],
    ));

    let dc = &s["discard"];
    if !dc.is_null() {
        sections.push((
            "discard",
            vec![
                row("mode", dc["mode"].as_str().unwrap_or("-").to_string()),
                row(
                    "discarded",
                    format!(
                        "{} ({} segments in {} requests)",
                        size(u(&dc["bytes"])),
                        u(&dc["segments"]),
                        u(&dc["requests"])
                    ),
                ),
                row("queued", format!("{} segments", u(&dc["queued_segments"]))),
                row(
                    "trims",
                    format!("{} ({})", u(&dc["trims"]), size(u(&dc["trim_bytes"]))),
                ),
            ],
        ));
    }

    let sg = &s["segments"];
    let (total, free) = (u(&sg["total"]), u(&sg["free"]));
    sections.push((
        "segments",
        vec![
            row(
                "total",
                format!("{total} of {} each", size(u(&sg["segment_blocks"]) * BLOCK)),
            ),
            row("free", format!("{free} ({})", percent(free, total))),
            // What statfs does not count as free; the rest is reclaimable.
            row("live", blocks(u(&sg["live_blocks"]))),
            row("held by snapshots", blocks(u(&sg["snapshot_blocks"]))),
        ],
    ));

    let cm = &s["compaction"];
    if !cm.is_null() {
        sections.push((
            "compaction when idle",
            vec![
                row("files read in order", u(&cm["candidates"]).to_string()),
                row(
                    "batches laid out again",
                    format!(
                        "{} ({}), {} left as they were",
                        u(&cm["batches_moved"]),
                        blocks(u(&cm["blocks_moved"])),
                        u(&cm["batches_left"])
                    ),
                ),
            ],
        ));
    }

    let dl = &s["deletes"];
    if !dl.is_null() {
        let m = &dl["since_mount"];
        sections.push((
            "deletes",
            vec![
                // Counted live above until freed: statfs does not offer them.
                row(
                    "being freed",
                    format!(
                        "{} files, {}",
                        u(&dl["reclaiming_files"]),
                        blocks(u(&dl["reclaiming_blocks"]))
                    ),
                ),
                row(
                    "freed at once",
                    format!("{} files", u(&m["foreground_files"])),
                ),
                row(
                    "freed in background",
                    format!(
                        "{} of {} files queued, {}",
                        u(&m["reclaimed_files"]),
                        u(&m["queued_files"]),
                        blocks(u(&m["reclaimed_blocks"]))
                    ),
                ),
            ],
        ));
    }

    sections.push(("I/O queue", fields(&s["io"])));
    sections.push(("store counters", fields(&s["store"])));
    // Requests and bytes of an object store, its disk cache's hits (and a
    // reader's revalidations), and what the cleaner's reads cost.
    if s["object_store"].is_object() {
        sections.push(("object store", fields(&s["object_store"])));
    }

    let m = &s["memory"];
    let mut mem = vec![row(
        "in use",
        format!(
            "{} of at most {}",
            size(u(&m["bytes"])),
            size(u(&m["bound_bytes"]))
        ),
    )];
    for it in m["items"].as_array().into_iter().flatten() {
        mem.push(row(
            it["name"].as_str().unwrap_or("?"),
            format!(
                "{} of at most {} ({} entries)",
                size(u(&it["bytes"])),
                size(u(&it["max_bytes"])),
                u(&it["entries"])
            ),
        ));
    }
    sections.push(("memory", mem));

    // A writer on an object store: the checkpoints read-only mounts hold
    // and the snapshots it made for them (lsfs_object::readers).
    let r = &s["readers"];
    if !r.is_null() {
        let list = |v: &Value| {
            let cnos: Vec<String> = v
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| u(c).to_string())
                .collect();
            if cnos.is_empty() {
                "none".to_string()
            } else {
                cnos.join(" ")
            }
        };
        let held: Vec<String> = r["held"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(cno, n)| match u(n) {
                1 => format!("{cno} (1 reader)"),
                n => format!("{cno} ({n} readers)"),
            })
            .collect();
        let mut rows = vec![
            row(
                "held",
                if held.is_empty() {
                    "none".to_string()
                } else {
                    held.join(", ")
                },
            ),
            row("kept as snapshots", list(&r["promoted"])),
            row(
                "promoted, demoted",
                format!("{}, {}", u(&r["promotions"]), u(&r["demotions"])),
            ),
        ];
        if let Some(e) = r["last_error"].as_str() {
            rows.push(row("last round failed", e.to_string()));
        }
        sections.push(("readers' holds", rows));
    }

    let f = &s["fuse"];
    if !f.is_null() {
        let mut fuse = vec![
            row("total", u(&f["total"]).to_string()),
            row("through io_uring", u(&f["through_io_uring"]).to_string()),
            row(
                "security.capability probes",
                u(&f["getxattr_security_capability"]).to_string(),
            ),
            row("polling spells", u(&f["polling_spells"]).to_string()),
            // Held off because other threads waited for a CPU
            // (lsfs-fuse's contention.rs).
            row("polling held off", u(&f["polling_holds"]).to_string()),
        ];
        for (op, n) in f["requests"].as_object().into_iter().flatten() {
            fuse.push(row(op, u(n).to_string()));
        }
        sections.push(("FUSE requests", fuse));
    }

    let mut out = String::new();
    for (title, rows) in sections {
        let width = rows
            .iter()
            .map(|(k, _)| k.chars().count())
            .max()
            .unwrap_or(0)
            + 1;
        out.push_str(&format!("\n{title}\n"));
        for (k, v) in rows {
            out.push_str(&format!("  {:<width$} {v}\n", format!("{k}:")));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn stats_are_text_in_aligned_sections() {
        let s = json!({
            "blocks_used": 256,
            "inodes_used": 3,
            "compress": "zstd",
            "read_only_reason": null,
            "view_follows": 2,
            "view_moves": 3,
            "cache": { "capacity_blocks": 16384, "resident_blocks": 4096, "dirty_blocks": 0,
                       "hits": 9, "misses": 1 },
            "checkpoint": { "current": 4, "count": 3, "shown": 2 },
            "device": { "reads": 2, "read_bytes": 8192, "writes": 1, "write_bytes": 1048576, "flushes": 1,
                        "discards": 3, "discard_bytes": 6291456, "fills": 1, "fill_bytes": 2097152 },
            "discard": { "mode": "batched", "segments": 3, "bytes": 6291456, "requests": 2,
                         "queued_segments": 1, "trims": 1, "trim_bytes": 2097152 },
            "segments": { "total": 100, "free": 25, "segment_blocks": 512, "live_blocks": 30000, "snapshot_blocks": 2000 },
            "deletes": { "reclaiming_files": 1, "reclaiming_blocks": 4096,
                         "since_mount": { "foreground_files": 5, "queued_files": 2, "reclaimed_files": 1,
                                          "reclaimed_blocks": 512, "steps": 3 } },
            "io": { "deferred": true, "limit_bytes": 67108864 },
            "store": { "blocks_written": 7, "stream_writes": { "meta": 4 } },
            "memory": { "bytes": 0, "bound_bytes": 0, "items": [] },
            "fuse": { "total": 2, "through_io_uring": 1, "getxattr_security_capability": 0,
                      "polling_spells": 5, "polling_holds": 1, "requests": { "LOOKUP": 2 } },
            "readers": { "held": { "7": 2 }, "promoted": [7], "promotions": 1, "demotions": 0,
                         "last_round_secs": 1, "last_error": null },
            "object_store": { "gets": 3, "get_bytes": 6291456, "disk_cache_revalidated": 4,
                              "cleaner": { "gets": 1, "deletes": 0 } },
        });
        let t = stats_text(&s);
        assert!(!t.contains('{'), "{t}");
        for want in [
            "\ncache\n",
            "  compression:         zstd\n",
            "  followed the writer: 2 times (opened the store again for blocks its cleaner moved)\n",
            "  moved on:            3 times (to the writer's newer checkpoints)\n",
            "  capacity: 16384 blocks (64.0 MiB)\n",
            "  resident: 4096 blocks (16.0 MiB, 25.0 % full)\n",
            "  hit rate: 90.0 % (9 hits, 1 misses)\n",
            "  free:              25 (25.0 %)\n",
            "  held by snapshots: 2000 blocks (7.8 MiB)\n",
            "  total:             100 of 2.0 MiB each\n",
            "  limit bytes: 67108864 (64.0 MiB)\n",
            "\nobject store\n",
            "  get bytes:              6291456 (6.0 MiB)\n",
            "  disk cache revalidated: 4\n",
            "  cleaner:                deletes 0, gets 1\n",
            "  reads:              2 (8.0 KiB)\n",
            "  stream writes:  meta 4\n",
            "  writes:             1 (1.0 MiB)\n",
            "  discards:           3 (6.0 MiB)\n",
            "  holes filled ahead: 1 (2.0 MiB)\n",
            "  discarded: 6.0 MiB (3 segments in 2 requests)\n",
            "  mode:      batched\n",
            "  trims:     1 (2.0 MiB)\n",
            "  LOOKUP:                     2\n",
            "  polling spells:             5\n",
            "  polling held off:           1\n",
            "  shown:   2 (this mount is a view of it)\n",
            "  being freed:         1 files, 4096 blocks (16.0 MiB)\n",
            "  freed in background: 1 of 2 files queued, 512 blocks (2.0 MiB)\n",
            "\nreaders' holds\n",
            "  held:              7 (2 readers)\n",
            "  kept as snapshots: 7\n",
        ] {
            assert!(t.contains(want), "{want:?} not in\n{t}");
        }
        assert!(!t.contains("read-only"), "{t}");
    }
}
