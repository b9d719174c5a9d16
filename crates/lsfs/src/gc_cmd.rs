//! `lsfs gc`: the cleaner of a mounted file system, and its plots.

use crate::control;
use plotters::prelude::*;
use serde_json::{json, Value};
use std::path::Path;

pub fn status(mnt: &Path, json_out: bool) -> Result<(), String> {
    let v = control::request(mnt, &json!({ "cmd": "gc-status" }))?;
    let s = &v["status"];
    if json_out {
        println!("{s}");
    } else {
        println!(
            "cleaner {} · policy {} · threaded logging {} · {:.1} % free (cleans below {} %, up to {} %) · {}",
            if s["enabled"].as_bool() == Some(true) {
                "on"
            } else {
                "off"
            },
            s["policy"].as_str().unwrap_or("?"),
            s["config"]["threaded_logging"].as_str().unwrap_or("?"),
            s["free_percent"].as_f64().unwrap_or(0.0),
            s["config"]["min_free_percent"],
            s["config"]["max_free_percent"],
            if s["on_battery"].as_bool() == Some(true) {
                "on battery"
            } else {
                "on AC"
            }
        );
        if !s["last_pass"].is_null() {
            let p = &s["last_pass"];
            println!(
                "last pass ({}): {} victims, {} blocks copied, efficiency {:.3}",
                p["reason"].as_str().unwrap_or(""),
                p["victims"].as_array().map(|a| a.len()).unwrap_or(0),
                p["blocks_copied"],
                p["efficiency"].as_f64().unwrap_or(0.0)
            );
        }
    }
    Ok(())
}

pub fn run(mnt: &Path, segments: u64, json_out: bool) -> Result<(), String> {
    let v = control::request(mnt, &json!({ "cmd": "gc-run", "segments": segments }))?;
    let p = &v["pass"];
    if json_out {
        println!("{p}");
    } else {
        for vic in p["victims"].as_array().into_iter().flatten() {
            println!(
                "segment {:>6}: {} live + {} protected + {} DAT blocks copied, {} dead entries freed",
                vic["segno"], vic["live_copied"], vic["protected_copied"], vic["dat_copied"], vic["freed_entries"]
            );
        }
        println!(
            "{} victims, {} late-aborted, {} plugged instead ({} holes), {} blocks copied, {} reclaimed, efficiency {:.3}",
            p["victims"].as_array().map(|a| a.len()).unwrap_or(0),
            p["late_aborted"].as_array().map(|a| a.len()).unwrap_or(0),
            p["plugged"].as_array().map(|a| a.len()).unwrap_or(0),
            p["holes_prepared"],
            p["blocks_copied"],
            p["blocks_reclaimed"],
            p["efficiency"].as_f64().unwrap_or(0.0)
        );
    }
    Ok(())
}

pub fn stats(mnt: &Path, json_out: bool) -> Result<Value, String> {
    let v = control::request(mnt, &json!({ "cmd": "gc-stats" }))?;
    if json_out {
        println!(
            "{}",
            json!({ "write_amplification": v["write_amplification"], "stats": v["stats"], "histogram": v["histogram"],
                    "census": v["census"], "object_store": v["object_store"] })
        );
    } else {
        println!("{}", write_amplification_line(&v["write_amplification"]));
        let s = &v["stats"];
        println!(
            "{} passes, {} segments cleaned, {} blocks copied, {} late aborts\nlog payload blocks: {} not copied by the cleaner, {} copies: cleaner amplification {:.3} (file data alone {:.3}); unaccounted {:.4}\nplain checkpoints given up for space {}, kept for the last {} s; snapshot changes awaiting reconciliation {} ({:.0} % through the first)",
            s["passes"],
            s["segments_cleaned"],
            s["blocks_copied"],
            s["late_aborts"],
            s["user_blocks_written"],
            s["cleaner_blocks_written"],
            s["cleaner_amplification"].as_f64().unwrap_or(1.0),
            s["file_data_cleaner_amplification"].as_f64().unwrap_or(1.0),
            s["unaccounted_fraction"].as_f64().unwrap_or(0.0),
            s["checkpoints_given_up"],
            s["checkpoints_kept_secs"],
            s["snapshot_changes_pending"],
            s["reconcile_progress"].as_f64().unwrap_or(1.0) * 100.0
        );
        let t = &s["threaded_logging"];
        println!(
            "threaded logging ({}): {} segments plugged instead of cleaned, {} holes, {} user blocks written into them in {} writes, {} holes ready; cleaning measured at {:.2} per freed block",
            v["threaded_logging"].as_str().unwrap_or("?"),
            t["segments_prepared"],
            t["holes_prepared"],
            t["blocks_plugged"],
            t["plug_writes"],
            s["holes_ready"],
            s["measured_clean_cost"].as_f64().unwrap_or(0.0)
        );
        let o = &v["object_store"];
        if !o.is_null() {
            println!(
                "object store: {} GETs ({} bytes), {} PUTs ({} bytes), {} DELETEs",
                o["gets"], o["get_bytes"], o["puts"], o["put_bytes"], o["deletes"]
            );
            let c = &o["cleaner"];
            println!(
                "  the cleaner's: {} GETs ({} bytes) reading victims, {} bytes copied (in the log's PUTs), {} DELETEs of freed segments",
                c["gets"], c["get_bytes"], c["copied_bytes"], c["deletes"]
            );
            if !o["wal_records"].is_null() {
                println!(
                    "write-ahead file: {} records ({} bytes) appended, {} uploads of everything",
                    o["wal_records"], o["wal_bytes"], o["wal_syncs"]
                );
            }
        }
        if let Some(m) = s["by_stream"].as_object() {
            for (stream, t) in m {
                let blocks = t["blocks"].as_f64().unwrap_or(0.0).max(1.0);
                println!(
                    "  {stream:>7} victims {}, mean live share when cleaned {:.2}",
                    t["victims"],
                    t["copied"].as_f64().unwrap_or(0.0) / blocks
                );
            }
        }
    }
    Ok(v)
}

/// The honest figure, as `lsfs stats` and `lsfs gc stats` print it first:
/// bytes the device wrote over bytes applications asked to store.
pub fn write_amplification_line(w: &Value) -> String {
    let mib = |k: &str| w[k].as_u64().unwrap_or(0) as f64 / (1 << 20) as f64;
    let r = |k: &str| w[k].as_f64().map_or("-".to_string(), |x| format!("{x:.2}"));
    format!(
        "device writes / application writes: {} since mount ({:.1} MiB for {:.1} MiB), {} over the last {} s",
        r("ratio"),
        mib("device_bytes"),
        mib("app_bytes"),
        r("recent_ratio"),
        w["recent_secs"].as_u64().unwrap_or(0)
    )
}

/// `lsfs gc start|stop|policy|threaded`: the request, then the setting it
/// left (the reply as JSON with `--json`).
pub fn control(mnt: &Path, req: Value, json_out: bool) -> Result<(), String> {
    let v = control::request(mnt, &req)?;
    if json_out {
        println!("{v}");
    } else {
        println!("{}", control_text(&v));
    }
    Ok(())
}

/// The text of a reply to gc-start, gc-stop, gc-policy or gc-threaded.
pub fn control_text(v: &Value) -> String {
    if let Some(on) = v["enabled"].as_bool() {
        format!("background cleaning {}", if on { "on" } else { "off" })
    } else if let Some(p) = v["policy"].as_str() {
        format!("cleaning policy {p}")
    } else if let Some(m) = v["threaded_logging"].as_str() {
        format!("threaded logging {m}")
    } else {
        "done".to_string()
    }
}

/// An SVG with the utilization histogram (512 bins) and write amplification over time.
pub fn plot(mnt: &Path, out: &Path) -> Result<(), String> {
    let v = control::request(mnt, &json!({ "cmd": "gc-stats" }))?;
    let hist: Vec<u64> = v["histogram"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_u64)
        .collect();
    let wa: Vec<(f64, f64)> = v["stats"]["wa_history"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| Some((p[0].as_f64()?, p[1].as_f64()?)))
        .collect();
    plot_to(out, &hist, &wa).map_err(|e| format!("plot {}: {e}", out.display()))
}

pub fn plot_to(
    out: &Path,
    hist: &[u64],
    wa: &[(f64, f64)],
) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::new(out, (1000, 420)).into_drawing_area();
    root.fill(&WHITE)?;
    let (left, right) = root.split_horizontally(560);
    let ymax = hist.iter().copied().max().unwrap_or(1).max(1);
    let mut c = ChartBuilder::on(&left)
        .caption("segment utilization (512 bins)", ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(40)
        .build_cartesian_2d(0f64..1f64, 0u64..ymax + 1)?;
    c.configure_mesh()
        .x_desc("live blocks / segment size")
        .y_desc("segments")
        .draw()?;
    c.draw_series(
        hist.iter()
            .enumerate()
            .filter(|(_, &n)| n > 0)
            .map(|(i, &n)| {
                let x0 = i as f64 / hist.len() as f64;
                Rectangle::new([(x0, 0), (x0 + 1.0 / hist.len() as f64, n)], BLUE.filled())
            }),
    )?;
    let tmax = wa.iter().map(|p| p.0).fold(1.0, f64::max);
    let wmax = wa.iter().map(|p| p.1).fold(2.0, f64::max);
    let mut c = ChartBuilder::on(&right)
        .caption("write amplification", ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(40)
        .build_cartesian_2d(0f64..tmax, 1f64..wmax)?;
    c.configure_mesh()
        .x_desc("seconds since mount")
        .y_desc("(user + cleaner) / user")
        .draw()?;
    c.draw_series(LineSeries::new(wa.iter().copied(), &RED))?;
    root.present()?;
    Ok(())
}
