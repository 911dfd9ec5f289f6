//! Chrome trace / Perfetto export (the JSON "trace event" format): slices for kernels and
//! transfers, instant events for faults, counter tracks for resident bytes and link traffic.

use unimem_core::seam::{Direction, MemEvent};

use crate::read::Log;

const PID: u64 = 1;
const TID_COMPUTE: u64 = 1;
const TID_H2D: u64 = 2;
const TID_D2H: u64 = 3;
const TID_FAULTS: u64 = 4;
const TID_ADVISOR: u64 = 5;

fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

/// The log as a Chrome trace (a JSON object with `traceEvents`).
pub fn chrome_trace(log: &Log) -> serde_json::Value {
    use serde_json::json;
    let mut out = Vec::new();
    for (tid, name) in
        [(TID_COMPUTE, "compute"), (TID_H2D, "link H2D"), (TID_D2H, "link D2H"), (TID_FAULTS, "faults")]
    {
        out.push(json!({"ph": "M", "name": "thread_name", "pid": PID, "tid": tid, "args": {"name": name}}));
    }
    out.push(json!({"ph": "M", "name": "process_name", "pid": PID, "args": {"name": format!("unimem: {}", log.source)}}));
    // Hints carry no time: they take the latest time seen so far.
    let mut now = 0u64;
    for e in &log.events {
        match e {
            MemEvent::Kernel { start_ns: t, .. } | MemEvent::Migration { start_ns: t, .. } => {
                now = now.max(*t)
            }
            MemEvent::Fault { at_ns, .. }
            | MemEvent::Thrashing { at_ns, .. }
            | MemEvent::RemoteMap { at_ns, .. }
            | MemEvent::Throttling { start_ns: at_ns, .. } => now = now.max(*at_ns),
            _ => {}
        }
        match e {
            MemEvent::Kernel { name, start_ns, end_ns, stall_ns, .. } => out.push(json!({
                "ph": "X", "name": name, "cat": "kernel", "pid": PID, "tid": TID_COMPUTE,
                "ts": us(*start_ns), "dur": us(end_ns - start_ns), "args": {"stall_ns": stall_ns}
            })),
            MemEvent::Migration { region, offset, bytes, dir, cause, start_ns, end_ns } => {
                let tid = if *dir == Direction::H2D { TID_H2D } else { TID_D2H };
                out.push(json!({
                    "ph": "X", "name": format!("{} ({cause:?})", log.name_of(*region)).to_lowercase(),
                    "cat": "migration", "pid": PID, "tid": tid, "ts": us(*start_ns), "dur": us(end_ns - start_ns),
                    "args": {"region": region.0, "offset": offset, "bytes": bytes}
                }));
            }
            MemEvent::Fault { region, offset, bytes, by, at_ns } => out.push(json!({
                "ph": "i", "s": "t", "name": format!("fault {}", log.name_of(*region)), "cat": "fault",
                "pid": PID, "tid": TID_FAULTS, "ts": us(*at_ns),
                "args": {"region": region.0, "offset": offset, "bytes": bytes, "by": by}
            })),
            MemEvent::Thrashing { region, offset, bytes, by, at_ns } => out.push(json!({
                "ph": "i", "s": "t", "name": format!("thrashing {}", log.name_of(*region)), "cat": "thrashing",
                "pid": PID, "tid": TID_FAULTS, "ts": us(*at_ns),
                "args": {"region": region.0, "offset": offset, "bytes": bytes, "by": by}
            })),
            MemEvent::RemoteMap { region, offset, bytes, cause, at_ns } => out.push(json!({
                "ph": "i", "s": "t", "name": format!("remote map {}", log.name_of(*region)), "cat": "remote_map",
                "pid": PID, "tid": TID_FAULTS, "ts": us(*at_ns),
                "args": {"region": region.0, "offset": offset, "bytes": bytes, "cause": cause}
            })),
            MemEvent::Throttling { region, offset, by, start_ns, end_ns } => out.push(json!({
                "ph": "X", "name": format!("throttled {}", log.name_of(*region)), "cat": "throttling",
                "pid": PID, "tid": TID_FAULTS, "ts": us(*start_ns), "dur": us(end_ns.saturating_sub(*start_ns)),
                "args": {"region": region.0, "offset": offset, "by": by}
            })),
            MemEvent::Hint { hint, region, offset, bytes, reason, kernel } => out.push(json!({
                "ph": "i", "s": "t", "name": format!("{hint} {}", log.name_of(*region)), "cat": "hint",
                "pid": PID, "tid": TID_ADVISOR, "ts": us(now),
                "args": {"region": region.0, "offset": offset, "bytes": bytes, "reason": reason, "kernel": kernel}
            })),
            _ => {}
        }
    }
    // Resident bytes and cumulative link traffic: the series the plot and the summary use.
    for p in crate::resident_series(log) {
        let ts = us(p.t_ns);
        out.push(json!({"ph": "C", "name": "device resident bytes", "pid": PID, "ts": ts, "args": {"bytes": p.resident_bytes}}));
        out.push(json!({"ph": "C", "name": "link traffic (cumulative bytes)", "pid": PID, "ts": ts, "args": {"h2d": p.h2d_bytes, "d2h": p.d2h_bytes}}));
    }
    json!({"traceEvents": out, "displayTimeUnit": "ns"})
}
