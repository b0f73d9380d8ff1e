//! The picture: per flow a stacked bar of its segments' mean latencies
//! (means add up to the flow's T8, medians would not), in the manner of
//! the published stack-latency figures. Drawn with `plotters` to SVG.

use std::path::Path;

use plotters::prelude::*;

use crate::stack::matcher::FlowReport;

/// One colour per segment T1…T7 (a merged segment takes its first part's).
const COLOURS: [RGBColor; 7] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
    RGBColor(0xe3, 0x77, 0xc2),
];

#[derive(Debug, thiserror::Error)]
#[error("drawing the plot: {0}")]
pub struct PlotError(String);

fn err<E: std::fmt::Display>(e: E) -> PlotError {
    PlotError(e.to_string())
}

/// Segment index (0 for T1) of a segment name's first part.
fn first_part(name: &str) -> usize {
    name.trim_start_matches('T')
        .split('+')
        .next()
        .and_then(|n| n.parse::<usize>().ok())
        .map_or(0, |n| n.saturating_sub(1).min(6))
}

/// What each segment is, for the legend.
const MEANING: [&str; 7] = [
    "T1 socket → TCP",
    "T2 TCP → IP done",
    "T3 IP → device (qdisc)",
    "T4 network",
    "T5 device → IP (GRO)",
    "T6 IP → TCP",
    "T7 TCP → socket (reader)",
];

/// One bar: its label and its segments' (name, mean µs), in stream order.
#[derive(Clone, Debug, PartialEq)]
pub struct Bar {
    pub label: String,
    pub segments: Vec<(String, f64)>,
}

/// Draws the reports that timed anything (at most 40 flows, the busiest).
pub fn stacked_bars(path: &Path, reports: &[FlowReport]) -> Result<(), PlotError> {
    let mut flows: Vec<&FlowReport> = reports.iter().filter(|r| r.complete > 0).collect();
    flows.sort_by_key(|r| std::cmp::Reverse(r.complete));
    flows.truncate(40);
    flows.sort_by_key(|r| (r.key, r.record_seq));
    let bars: Vec<Bar> = flows
        .iter()
        .map(|r| Bar {
            label: format!("{}:{} → {}", r.key.src, r.key.sport, r.key.dport),
            segments: r
                .segments
                .iter()
                .map(|s| (s.name.clone(), s.summary.mean_us))
                .collect(),
        })
        .collect();
    draw_bars(path, &bars)
}

/// Draws one stacked bar per entry of `bars` (for reports read back from
/// JSON lines, as the demo does).
pub fn draw_bars(path: &Path, bars: &[Bar]) -> Result<(), PlotError> {
    let mut svg = String::new();
    render_bars(bars, &mut svg)?;
    write_svg(path, &svg)
}

/// The picture into a file the process creates, never through a planted
/// symlink (the manager and the agents run as root): plotters' own
/// file backend would open the path as it stands.
pub(crate) fn write_svg(path: &Path, svg: &str) -> Result<(), PlotError> {
    use std::io::Write;
    let mut f = xdprobe_exporter::safe_file::create_new_or_truncate(path)
        .map_err(|e| PlotError(e.to_string()))?;
    f.write_all(svg.as_bytes())
        .map_err(|e| PlotError(format!("{}: {e}", path.display())))
}

fn render_bars(bars: &[Bar], svg: &mut String) -> Result<(), PlotError> {
    let totals: Vec<f64> = bars
        .iter()
        .map(|b| b.segments.iter().map(|s| s.1).sum::<f64>())
        .collect();
    let ymax = totals.iter().copied().fold(1.0f64, f64::max) * 1.35;
    let n = bars.len().max(1);
    let width = (260 + 110 * n) as u32;

    let root = SVGBackend::with_string(svg, (width.max(720), 520)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Where each flow's time goes (mean µs per segment)",
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(60)
        .y_label_area_size(70)
        .build_cartesian_2d((0..n - 1).into_segmented(), 0f64..ymax)
        .map_err(err)?;
    let labels: Vec<String> = bars.iter().map(|b| b.label.clone()).collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .y_desc("µs (mean)")
        .x_desc("flow (sender → receiver port)")
        .x_labels(n)
        .x_label_formatter(&|x| match x {
            SegmentValue::CenterOf(i) => labels.get(*i).cloned().unwrap_or_default(),
            _ => String::new(),
        })
        .draw()
        .map_err(err)?;

    let mut seen = [false; 7];
    for (i, b) in bars.iter().enumerate() {
        let mut base = 0.0;
        for (name, mean_us) in &b.segments {
            let k = first_part(name);
            let top = base + mean_us;
            let colour = COLOURS[k];
            let mut bar = Rectangle::new(
                [
                    (SegmentValue::Exact(i), base),
                    (SegmentValue::Exact(i + 1), top),
                ],
                colour.filled(),
            );
            bar.set_margin(0, 0, 14, 14);
            let series = chart.draw_series(std::iter::once(bar)).map_err(err)?;
            if !seen[k] {
                seen[k] = true;
                let label = if name.contains('+') {
                    format!("{name} (no hook between)")
                } else {
                    MEANING[k].to_owned()
                };
                series.label(label).legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 10, y + 5)], colour.filled())
                });
            }
            base = top;
        }
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A symlink where the plot goes is refused and its target left as it
    /// was; a plain path gets the picture.
    #[test]
    fn the_plot_never_follows_a_symlink() {
        let dir = std::env::temp_dir().join(format!("xdprobe-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let target = dir.join("precious");
        std::fs::write(&target, b"keep\n").unwrap();
        let link = dir.join("flows.svg");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let bars = [Bar {
            label: "192.0.2.1:40000 → 80".into(),
            segments: vec![("T1".into(), 3.0), ("T4".into(), 40.0)],
        }];
        let e = draw_bars(&link, &bars).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert_eq!(std::fs::read(&target).unwrap(), b"keep\n");
        let plain = dir.join("ok.svg");
        draw_bars(&plain, &bars).unwrap();
        let svg = std::fs::read_to_string(&plain).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("T4"), "{svg}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
