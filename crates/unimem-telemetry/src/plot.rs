//! An SVG plot of a log: device-resident bytes and cumulative link traffic over time.

use std::fmt::Write;

use unimem_core::seam::{Direction, Location, MemEvent};

use crate::read::Log;

const W: f64 = 900.0;
const H: f64 = 260.0;
const PAD: f64 = 50.0;

/// Series over time: (t_ns, resident, h2d cumulative, d2h cumulative).
fn series(log: &Log) -> Vec<(u64, u64, u64, u64)> {
    let mut pts = vec![(0u64, 0u64, 0u64, 0u64)];
    let (mut t, mut res, mut h2d, mut d2h) = (0u64, 0i64, 0u64, 0u64);
    for e in &log.events {
        match e {
            MemEvent::Migration { bytes, dir, end_ns, .. } => {
                t = t.max(*end_ns);
                match dir {
                    Direction::H2D => {
                        res += *bytes as i64;
                        h2d += bytes;
                    }
                    Direction::D2H => {
                        res -= *bytes as i64;
                        d2h += bytes;
                    }
                }
            }
            MemEvent::Populate { bytes, on: Location::DEVICE, .. } => res += *bytes as i64,
            MemEvent::Drop { bytes, from: Location::DEVICE, .. } => res -= *bytes as i64,
            MemEvent::Kernel { end_ns, .. } => t = t.max(*end_ns),
            _ => continue,
        }
        pts.push((t, res.max(0) as u64, h2d, d2h));
    }
    pts
}

fn polyline(out: &mut String, pts: &[(f64, f64)], colour: &str) {
    let coords: Vec<String> = pts.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
    let _ = writeln!(
        out,
        r#"<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{}"/>"#,
        coords.join(" ")
    );
}

/// The plot as an SVG document: two panels, resident bytes on top, link traffic below.
pub fn svg(log: &Log) -> String {
    let pts = series(log);
    let t_max = pts.iter().map(|p| p.0).max().unwrap_or(0).max(1) as f64;
    let res_max = pts.iter().map(|p| p.1).max().unwrap_or(0).max(1) as f64;
    let link_max = pts.iter().map(|p| p.2.max(p.3)).max().unwrap_or(0).max(1) as f64;
    let x = |t: u64| PAD + (W - 2.0 * PAD) * t as f64 / t_max;
    let panel = |top: f64, v: u64, max: f64| top + H - PAD - (H - 2.0 * PAD) * v as f64 / max;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{}" viewBox="0 0 {W} {}">"#,
        2.0 * H,
        2.0 * H
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    for (i, title) in [(0.0, "device-resident bytes"), (1.0, "link traffic, cumulative (H2D blue, D2H red)")]
    {
        let top = i * H;
        let _ = writeln!(
            out,
            r#"<text x="{PAD}" y="{}" font-family="sans-serif" font-size="13">{title}</text>"#,
            top + 20.0
        );
        let _ = writeln!(
            out,
            r#"<rect x="{PAD}" y="{}" width="{}" height="{}" fill="none" stroke="gray"/>"#,
            top + PAD,
            W - 2.0 * PAD,
            H - 2.0 * PAD
        );
    }
    let _ = writeln!(
        out,
        r#"<text x="{PAD}" y="{}" font-family="sans-serif" font-size="11">0 .. {:.3} s; max {:.1} MiB resident, {:.1} MiB moved</text>"#,
        2.0 * H - 15.0,
        t_max / 1e9,
        res_max / (1u64 << 20) as f64,
        link_max / (1u64 << 20) as f64
    );
    polyline(&mut out, &pts.iter().map(|p| (x(p.0), panel(0.0, p.1, res_max))).collect::<Vec<_>>(), "black");
    polyline(&mut out, &pts.iter().map(|p| (x(p.0), panel(H, p.2, link_max))).collect::<Vec<_>>(), "blue");
    polyline(&mut out, &pts.iter().map(|p| (x(p.0), panel(H, p.3, link_max))).collect::<Vec<_>>(), "red");
    out.push_str("</svg>\n");
    out
}
