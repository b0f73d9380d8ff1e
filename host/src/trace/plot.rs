//! The per-step waterfall: for each group's most common path, one row
//! per step, a bar starting where the previous step ended (means add up
//! along the path) and as long as the step's mean, with a thin line out
//! to its p99. Drawn with `plotters` to SVG.

use std::path::Path;

use plotters::prelude::*;

use crate::trace::report::Report;

const COLOURS: [RGBColor; 3] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x2c, 0xa0, 0x2c),
];

#[derive(Debug, thiserror::Error)]
#[error("drawing the waterfall: {0}")]
pub struct PlotError(String);

fn err<E: std::fmt::Display>(e: E) -> PlotError {
    PlotError(e.to_string())
}

fn short(p: &str) -> &str {
    p.split_once(':').map_or(p, |(_, n)| n)
}

struct Row {
    label: String,
    start: f64,
    mean: f64,
    p99: f64,
    colour: RGBColor,
}

/// Draws the report's paths into `path` (SVG).
pub fn waterfall(path: &Path, r: &Report) -> Result<(), PlotError> {
    let mut svg = String::new();
    render(r, &mut svg)?;
    crate::stack::plot::write_svg(path, &svg).map_err(err)
}

fn render(r: &Report, svg: &mut String) -> Result<(), PlotError> {
    let mut rows = Vec::new();
    for (gi, g) in r.groups.iter().enumerate() {
        let mut at = 0.0;
        for s in &g.path_steps {
            rows.push(Row {
                label: format!("{}: {} → {}", g.name, short(&s.from), short(&s.to)),
                start: at,
                mean: s.summary.mean_us,
                p99: s.summary.p99_us,
                colour: COLOURS[gi % COLOURS.len()],
            });
            at += s.summary.mean_us;
        }
    }
    let xmax = rows
        .iter()
        .map(|r| (r.start + r.mean).max(r.start + r.p99))
        .fold(1.0f64, f64::max)
        * 1.08;
    let n = rows.len().max(1);
    let height = (120 + 26 * n) as u32;
    let root = SVGBackend::with_string(svg, (1000, height.max(240))).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Kernel path per step (mean, whisker to p99; µs from the first point)",
            ("sans-serif", 16),
        )
        .margin(10)
        .x_label_area_size(36)
        .y_label_area_size(330)
        .build_cartesian_2d(0f64..xmax, (0..n as i32).into_segmented())
        .map_err(err)?;
    // Row i is drawn from the top: segment n-1-i.
    let labels: Vec<String> = rows.iter().map(|r| r.label.clone()).collect();
    chart
        .configure_mesh()
        .disable_y_mesh()
        .x_desc("µs")
        .y_labels(n)
        .y_label_formatter(&|y| match y {
            SegmentValue::CenterOf(k) | SegmentValue::Exact(k) => {
                usize::try_from(n as i32 - 1 - *k)
                    .ok()
                    .and_then(|i| labels.get(i).cloned())
                    .unwrap_or_default()
            }
            SegmentValue::Last => String::new(),
        })
        .draw()
        .map_err(err)?;
    for (i, r) in rows.iter().enumerate() {
        let k = (n - 1 - i) as i32;
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [
                    (r.start, SegmentValue::Exact(k)),
                    (
                        r.start + r.mean.max(xmax / 500.0),
                        SegmentValue::Exact(k + 1),
                    ),
                ],
                r.colour.filled(),
            )))
            .map_err(err)?;
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![
                    (r.start + r.mean, SegmentValue::CenterOf(k)),
                    (r.start + r.p99, SegmentValue::CenterOf(k)),
                ],
                BLACK.stroke_width(1),
            )))
            .map_err(err)?;
    }
    root.present().map_err(err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::echo::Direction;
    use crate::trace::record::{ProbeRecord, StepRecord, TrailRecord};
    use crate::trace::report::report;

    #[test]
    fn draws_one_row_per_step() {
        let t = |dir, gap| TrailRecord {
            first_us: 0,
            end: "consumed".into(),
            drop_reason: None,
            drop_reason_name: None,
            len: 60,
            flow: None,
            probe: Some(ProbeRecord {
                run: 1,
                seq: 0,
                dir,
            }),
            lost_steps: 0,
            mono_ns: None,
            tcp: None,
            segment_of: None,
            segmented: 0,
            steps: [
                ("net:net_dev_queue", 0),
                ("net:netif_rx", gap),
                ("net:netif_receive_skb", 3 * gap),
            ]
            .iter()
            .map(|&(p, t)| StepRecord {
                point: p.into(),
                t_ns: t,
                netns: 0,
                ifindex: 0,
                cpu: 0,
            })
            .collect(),
        };
        let r = report(&[t(Direction::Request, 2_000), t(Direction::Reply, 5_000)]);
        let dir = std::env::temp_dir().join(format!("xdprobe-waterfall-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("w.svg");
        waterfall(&f, &r).unwrap();
        let svg = std::fs::read_to_string(&f).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        for label in [
            "request: net_dev_queue → netif_rx",
            "request: netif_rx → netif_receive_skb",
            "reply: net_dev_queue → netif_rx",
            "reply: netif_rx → netif_receive_skb",
        ] {
            assert!(svg.contains(label), "{label} missing");
        }
        assert!(svg.matches("<rect").count() >= 4);
    }
}
