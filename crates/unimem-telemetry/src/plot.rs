//! An SVG plot of a log (drawn with `plotters`): device-resident bytes over time, and the
//! cumulative bytes moved each way over the link, from [`crate::resident_series`].

use plotters::prelude::*;
use unimem_core::units::Bytes;

use crate::read::Log;
use crate::series::{peak_resident_bytes, resident_series};

/// The unit a byte axis reaching `max` is drawn in: GiB from 1 GiB on, else MiB.
fn unit(max: u64) -> (f64, &'static str) {
    if max >= 1 << 30 {
        ((1u64 << 30) as f64, "GiB")
    } else {
        ((1u64 << 20) as f64, "MiB")
    }
}

use plotters::coord::types::RangedCoordf64;

/// Draws `chart`'s legend at `position` in the style of every unimem plot (a framed, nearly
/// opaque box), for the telemetry plot and `unimem plan --plot` alike.
pub fn draw_legend<'a, DB: DrawingBackend + 'a, CT: plotters::coord::CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
    position: SeriesLabelPosition,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    chart
        .configure_series_labels()
        .position(position)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
}

type Panel<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// One panel: `caption`, time in milliseconds up to `t_max` across, `y_desc` up to `y_max` up,
/// its mesh drawn.
fn panel<'a, 'b>(
    area: &'a DrawingArea<SVGBackend<'b>, plotters::coord::Shift>,
    caption: &str,
    t_max: f64,
    y_max: f64,
    y_desc: &str,
) -> Result<Panel<'a, 'b>, String> {
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(64)
        .build_cartesian_2d(0.0..t_max, 0.0..y_max)
        .map_err(|e| e.to_string())?;
    chart.configure_mesh().x_desc("time (ms)").y_desc(y_desc).draw().map_err(|e| e.to_string())?;
    Ok(chart)
}

/// The plot as an SVG document: resident bytes on top, link traffic below, time in
/// milliseconds on both; or why it could not be drawn.
pub fn svg(log: &Log) -> Result<String, String> {
    let series = resident_series(log);
    let ms = |t: u64| t as f64 / 1e6;
    let t_max = ms(series.last().map_or(0, |p| p.t_ns)).max(1e-3);
    let peak = peak_resident_bytes(&series);
    let (res_unit, res_name) = unit(peak);
    let res_max = (peak as f64 / res_unit).max(1e-6) * 1.1;
    let moved = series.last().map_or(0, |p| p.h2d_bytes.max(p.d2h_bytes));
    let (link_unit, link_name) = unit(moved);
    let link_max = (moved as f64 / link_unit).max(1e-6) * 1.1;
    let err = |e: &dyn std::fmt::Display| e.to_string();
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (960, 640)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(&e))?;
        let root = root.titled(&log.source, ("sans-serif", 15)).map_err(|e| err(&e))?;
        let (top, bottom) = root.split_vertically(300);
        let caption = format!("device-resident bytes (peak {})", Bytes(peak));
        let mut chart = panel(&top, &caption, t_max, res_max, &format!("resident ({res_name})"))?;
        // A step line: each value holds until the next change.
        let steps = series.windows(2).flat_map(|w| {
            let (a, b) = (w[0], w[1]);
            [
                (ms(b.t_ns), a.resident_bytes as f64 / res_unit),
                (ms(b.t_ns), b.resident_bytes as f64 / res_unit),
            ]
        });
        chart
            .draw_series(LineSeries::new(std::iter::once((0.0, 0.0)).chain(steps), BLACK.stroke_width(1)))
            .map_err(|e| err(&e))?
            .label("device-resident")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], BLACK));
        draw_legend(&mut chart, SeriesLabelPosition::UpperRight).map_err(|e| err(&e))?;

        let mut chart =
            panel(&bottom, "link traffic, cumulative", t_max, link_max, &format!("moved ({link_name})"))?;
        for (label, color, pick) in [
            (
                "host to device",
                BLUE,
                (|p: &crate::SeriesPoint| p.h2d_bytes) as fn(&crate::SeriesPoint) -> u64,
            ),
            ("device to host", RED, |p: &crate::SeriesPoint| p.d2h_bytes),
        ] {
            let line = series.iter().map(|p| (ms(p.t_ns), pick(p) as f64 / link_unit));
            chart
                .draw_series(LineSeries::new(line, color.stroke_width(2)))
                .map_err(|e| err(&e))?
                .label(label)
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color.stroke_width(2)));
        }
        draw_legend(&mut chart, SeriesLabelPosition::UpperLeft).map_err(|e| err(&e))?;
        root.present().map_err(|e| err(&e))?;
    }
    Ok(out)
}
