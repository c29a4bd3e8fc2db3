//! SVG plot of `bench malloc`: % increase vs sampling interval, one curve
//! per profiler, one panel per workload (the source paper's figure 2).

use std::collections::BTreeMap;
use std::path::Path;

use plotters::prelude::*;

use super::malloc::{ConfigResult, Workload};
use super::BenchError;

const COLORS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

type Curves = BTreeMap<String, Vec<(f64, f64)>>;

fn curves(results: &[ConfigResult], w: Workload) -> Curves {
    let mut c: Curves = BTreeMap::new();
    for r in results.iter().filter(|r| r.workload == w) {
        if let Some(i) = r.interval {
            let name = format!("{} ({}, {} thr)", r.label, r.config.allocator, r.threads);
            c.entry(name).or_default().push(((i as f64).log2(), r.increase_pct));
        }
    }
    for v in c.values_mut() {
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    c
}

fn err(path: &Path, e: impl std::fmt::Display) -> BenchError {
    BenchError::Io { path: path.to_path_buf(), source: std::io::Error::other(e.to_string()) }
}

pub fn write_svg(results: &[ConfigResult], path: &Path) -> Result<(), BenchError> {
    let panels: Vec<(Workload, Curves)> = [Workload::MallocTest, Workload::Pipeline]
        .into_iter()
        .map(|w| (w, curves(results, w)))
        .filter(|(_, c)| !c.is_empty())
        .collect();
    if panels.is_empty() {
        return Err(err(path, "no interval results to plot"));
    }
    let root = SVGBackend::new(path, (900, 420 * panels.len() as u32)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(path, e))?;
    let areas = root.split_evenly((panels.len(), 1));
    for ((w, curves), area) in panels.iter().zip(areas) {
        let xs = curves.values().flatten().map(|p| p.0);
        let (x0, x1) = xs.fold((f64::MAX, f64::MIN), |(a, b), x| (a.min(x), b.max(x)));
        let ys = curves.values().flatten().map(|p| p.1);
        let (y0, y1) = ys.fold((0f64, 10f64), |(a, b), y| (a.min(y), b.max(y)));
        let title = match w {
            Workload::MallocTest => "malloc-test: % increase of mean malloc cycles",
            Workload::Pipeline => "latency pipeline: % increase of mean tick-to-trade latency (1 % trimmed)",
        };
        let mut chart = ChartBuilder::on(&area)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(56)
            .build_cartesian_2d((x0 - 0.2)..(x1 + 0.2), (y0 - 5.0)..(y1 * 1.1 + 5.0))
            .map_err(|e| err(path, e))?;
        chart
            .configure_mesh()
            .x_desc("sampling interval")
            .y_desc("% increase over no profiler")
            .x_label_formatter(&|x| crate::units::format_size(2f64.powf(*x).round() as u64))
            .draw()
            .map_err(|e| err(path, e))?;
        for (i, (name, pts)) in curves.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            chart
                .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
                .map_err(|e| err(path, e))?
                .label(name.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2)));
            chart.draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled()))).map_err(|e| err(path, e))?;
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperRight)
            .draw()
            .map_err(|e| err(path, e))?;
    }
    root.present().map_err(|e| err(path, e))
}
