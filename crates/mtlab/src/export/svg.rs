//! `--svg DIR`: each plot view as NAME.svg (plotters): line plots with error
//! bars, grouped bars with interval whiskers, heat maps with their values.

use plotters::prelude::*;
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::view::{Boundary, Document, Plot, PlotKind, Scale, View};
use super::{ExportError, Exporter, Output};

pub struct SvgExporter;

const COLORS: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

fn color(i: usize) -> RGBColor {
    COLORS[i % COLORS.len()]
}

/// Series `i`'s colour as CSS, for a legend drawn outside the SVG.
pub(super) fn color_hex(i: usize) -> String {
    let c = color(i);
    format!("#{:02x}{:02x}{:02x}", c.0, c.1, c.2)
}

type DrawResult<T> = Result<T, String>;
type Chart<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// The chart every plot draws in: title, margins, label areas, the ranges.
fn frame<'a, 'b>(
    root: &'a DrawingArea<SVGBackend<'b>, Shift>,
    plot: &Plot,
    y_label_width: u32,
    x: std::ops::Range<f64>,
    y: std::ops::Range<f64>,
) -> DrawResult<Chart<'a, 'b>> {
    ChartBuilder::on(root)
        .caption(&plot.title, ("sans-serif", 18))
        .margin(14)
        .x_label_area_size(40)
        .y_label_area_size(y_label_width)
        .build_cartesian_2d(x, y)
        .map_err(e)
}

/// The series' names, upper right (curves here fall to the right).
fn legend<'a, 'b: 'a>(chart: &mut Chart<'a, 'b>) -> DrawResult<()> {
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(e)
}

fn e(x: impl std::fmt::Display) -> String {
    x.to_string()
}

/// Low and high of an axis with a margin; a flat range gets some height.
pub(super) fn span(values: impl Iterator<Item = f64>, from_zero: bool) -> (f64, f64) {
    let (mut lo, mut hi) = values.filter(|v| v.is_finite()).fold((f64::MAX, f64::MIN), |(a, b), v| (a.min(v), b.max(v)));
    if lo > hi {
        return (0.0, 1.0);
    }
    if from_zero {
        lo = lo.min(0.0);
        hi = hi.max(0.0);
    }
    let pad = if hi > lo { (hi - lo) * 0.08 } else { hi.abs().max(1.0) * 0.1 };
    (if from_zero && lo == 0.0 { 0.0 } else { lo - pad }, hi + pad)
}

pub(super) fn axis_value(scale: Scale, x: f64) -> f64 {
    match scale {
        Scale::Linear => x,
        Scale::Log2 | Scale::Log2Bytes => x.max(f64::MIN_POSITIVE).log2(),
    }
}

pub(super) fn tick_label(scale: Scale, v: f64) -> String {
    match scale {
        Scale::Linear => {
            if v.abs() >= 100.0 || v.fract() == 0.0 {
                format!("{v:.0}")
            } else {
                // As many decimals as the tick needs (0.005, 0.01, 2.5), up to 4.
                let t = format!("{v:.4}");
                t.trim_end_matches('0').trim_end_matches('.').to_string()
            }
        }
        // Powers of two only: a tick between two is not a size anyone sweeps.
        Scale::Log2 | Scale::Log2Bytes if (v - v.round()).abs() > 1e-6 => String::new(),
        Scale::Log2 => format!("{:.0}", 2f64.powf(v)),
        Scale::Log2Bytes => crate::units::format_size(2f64.powf(v).round().max(1.0) as u64),
    }
}

fn draw_line(plot: &Plot, x_scale: Scale, series: &[super::view::Series], svg: &mut String) -> DrawResult<()> {
    let root = SVGBackend::with_string(svg, (900, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(e)?;
    let xs = series.iter().flat_map(|s| s.points.iter().map(|p| axis_value(x_scale, p.x)));
    let (x0, x1) = span(xs, false);
    let ys = series.iter().flat_map(|s| s.points.iter().flat_map(|p| [Some(p.y), p.low, p.high]).flatten());
    let (y0, y1) = span(ys, true);
    let mut chart = frame(&root, plot, 64, x0..x1, y0..y1)?;
    chart
        .configure_mesh()
        .x_desc(&plot.x_label)
        .y_desc(&plot.y_label)
        .x_label_formatter(&|v| tick_label(x_scale, *v))
        .draw()
        .map_err(e)?;
    for (i, s) in series.iter().enumerate() {
        let c = color(i);
        let pts: Vec<(f64, f64)> = s.points.iter().map(|p| (axis_value(x_scale, p.x), p.y)).collect();
        chart
            .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))
            .map_err(e)?
            .label(s.name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2)));
        // Markers only where points are few enough to tell apart.
        if pts.len() <= 60 {
            chart.draw_series(pts.iter().map(|&p| Circle::new(p, 3, c.filled()))).map_err(e)?;
        }
        let bars = s.points.iter().filter_map(|p| {
            let x = axis_value(x_scale, p.x);
            Some(PathElement::new(vec![(x, p.low?), (x, p.high?)], c.stroke_width(1)))
        });
        chart.draw_series(bars).map_err(e)?;
    }
    legend(&mut chart)?;
    root.present().map_err(e)
}

/// A bar's box in the drawing's pixels and what hovering it says.
struct BarHover {
    x: i32,
    y: i32,
    w: i32,
    h: i32,
    text: String,
}

/// A bar's value as hover text: four significant digits, the interval
/// beside it when there is one.
fn bar_text(series: &str, group: &str, b: &super::view::Bar) -> String {
    let n = |v: f64| {
        let digits = if v == 0.0 { 0 } else { (3 - v.abs().log10().floor() as i32).clamp(0, 6) as usize };
        format!("{v:.digits$}")
    };
    match (b.low, b.high) {
        (Some(l), Some(h)) => format!("{series}, {group}: {} [{}, {}]", n(b.value), n(l), n(h)),
        _ => format!("{series}, {group}: {}", n(b.value)),
    }
}

/// Transparent boxes over the bars, each with its value as a `<title>`
/// (what a browser shows on hover), added at the end of the drawing so they
/// lie on top.
fn with_hovers(svg: &mut String, hovers: &[BarHover]) {
    let Some(end) = svg.rfind("</svg>") else { return };
    let mut boxes = String::from("<g class=\"bar-hover\">");
    for h in hovers {
        boxes.push_str(&format!(
            "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"transparent\"><title>{}</title></rect>",
            h.x,
            h.y,
            h.w.max(1),
            h.h.max(1),
            super::html::escape(&h.text)
        ));
    }
    boxes.push_str("</g>\n");
    svg.insert_str(end, &boxes);
}

fn draw_bars(
    plot: &Plot,
    groups: &[String],
    series: &[(String, Vec<Option<super::view::Bar>>)],
    with_legend: bool,
    svg: &mut String,
) -> DrawResult<Vec<BarHover>> {
    let mut hovers = Vec::new();
    let root = SVGBackend::with_string(svg, (900, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(e)?;
    let ys = series.iter().flat_map(|(_, v)| v.iter().flatten().flat_map(|b| [Some(b.value), b.low, b.high]).flatten());
    let (y0, y1) = span(ys, true);
    let n = groups.len().max(1);
    let mut chart = frame(&root, plot, 64, 0f64..n as f64, y0..y1)?;
    let labels = groups.to_vec();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_desc(&plot.x_label)
        .y_desc(&plot.y_label)
        .x_labels(n * 2 + 1)
        .x_label_formatter(&|v| {
            // Label group centres only.
            let i = v.floor() as usize;
            if (v - (i as f64 + 0.5)).abs() < 1e-6 { labels.get(i).cloned().unwrap_or_default() } else { String::new() }
        })
        .draw()
        .map_err(e)?;
    let k = series.len().max(1) as f64;
    let width = 0.8 / k;
    for (si, (name, values)) in series.iter().enumerate() {
        let c = color(si);
        let rects = values.iter().enumerate().filter_map(|(gi, b)| {
            let b = b.as_ref()?;
            let x = gi as f64 + 0.1 + si as f64 * width;
            Some(Rectangle::new([(x, 0f64.max(y0)), (x + width * 0.9, b.value)], c.filled()))
        });
        for (gi, b) in values.iter().enumerate() {
            let Some(b) = b else { continue };
            let x = gi as f64 + 0.1 + si as f64 * width;
            let (a, z) = (chart.backend_coord(&(x, b.value.max(0f64.max(y0)))), chart.backend_coord(&(x + width * 0.9, 0f64.max(y0).min(b.value))));
            let text = bar_text(name, groups.get(gi).map(String::as_str).unwrap_or(""), b);
            hovers.push(BarHover { x: a.0.min(z.0), y: a.1.min(z.1), w: (z.0 - a.0).abs(), h: (z.1 - a.1).abs(), text });
        }
        chart
            .draw_series(rects)
            .map_err(e)?
            .label(name.clone())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], c.filled()));
        let whiskers = values.iter().enumerate().filter_map(|(gi, b)| {
            let b = b.as_ref()?;
            let x = gi as f64 + 0.1 + si as f64 * width + width * 0.45;
            Some(PathElement::new(vec![(x, b.low?), (x, b.high?)], BLACK.stroke_width(1)))
        });
        chart.draw_series(whiskers).map_err(e)?;
    }
    if with_legend {
        legend(&mut chart)?;
    }
    root.present().map_err(e)?;
    Ok(hovers)
}

/// White to blue for better, white to red for worse: the eye finds the best cell.
pub(super) fn heat(t: f64, higher_is_better: bool) -> RGBColor {
    let t = t.clamp(0.0, 1.0);
    let t = if higher_is_better { t } else { 1.0 - t };
    let mix = |a: f64, b: f64| (a + (b - a) * t).round() as u8;
    RGBColor(mix(250.0, 33.0), mix(245.0, 102.0), mix(240.0, 172.0))
}

fn draw_heatmap(
    plot: &Plot,
    rows: &[String],
    columns: &[String],
    values: &[Vec<Option<f64>>],
    higher_is_better: bool,
    (row_bounds, column_bounds): (&[Boundary], &[Boundary]),
    svg: &mut String,
) -> DrawResult<()> {
    let cell = 56u32;
    let (w, h) = (160 + cell * columns.len() as u32 + 40, 110 + cell * rows.len() as u32 + 40);
    let root = SVGBackend::with_string(svg, (w.max(420), h.max(260))).into_drawing_area();
    root.fill(&WHITE).map_err(e)?;
    let (lo, hi) = span(values.iter().flatten().flatten().copied(), false);
    let (nr, nc) = (rows.len().max(1), columns.len().max(1));
    let mut chart = frame(&root, plot, 110, 0f64..nc as f64, 0f64..nr as f64)?;
    let (cl, rl) = (columns.to_vec(), rows.to_vec());
    chart
        .configure_mesh()
        .disable_mesh()
        .x_desc(&plot.x_label)
        .y_desc(&plot.y_label)
        .x_labels(nc * 2 + 1)
        .y_labels(nr * 2 + 1)
        .x_label_formatter(&|v| {
            let i = v.floor() as usize;
            if (v - (i as f64 + 0.5)).abs() < 1e-6 { cl.get(i).cloned().unwrap_or_default() } else { String::new() }
        })
        .y_label_formatter(&|v| {
            let i = v.floor() as usize;
            // Row 0 at the top, as a matrix reads.
            if (v - (i as f64 + 0.5)).abs() < 1e-6 { rl.get(nr.saturating_sub(1 + i)).cloned().unwrap_or_default() } else { String::new() }
        })
        .draw()
        .map_err(e)?;
    for (ri, row) in values.iter().enumerate() {
        let y = (nr - 1 - ri) as f64;
        for (ci, v) in row.iter().enumerate() {
            let x = ci as f64;
            let fill = match v {
                Some(v) => heat(if hi > lo { (v - lo) / (hi - lo) } else { 0.5 }, higher_is_better),
                None => RGBColor(230, 230, 230),
            };
            chart.draw_series(std::iter::once(Rectangle::new([(x, y), (x + 1.0, y + 1.0)], fill.filled()))).map_err(e)?;
            chart
                .draw_series(std::iter::once(Rectangle::new([(x, y), (x + 1.0, y + 1.0)], WHITE.stroke_width(1))))
                .map_err(e)?;
            if let Some(v) = v {
                let label = if v.abs() >= 100.0 { format!("{v:.0}") } else { format!("{v:.1}") };
                let style = TextStyle::from(("sans-serif", 13).into_font()).pos(Pos::new(HPos::Center, VPos::Center));
                chart.draw_series(std::iter::once(Text::new(label, (x + 0.5, y + 0.5), style))).map_err(e)?;
            }
        }
    }
    let line_style = |b: &Boundary| if b.strong { BLACK.stroke_width(3) } else { RGBColor(90, 90, 90).stroke_width(1) };
    for b in row_bounds.iter().filter(|b| b.after + 1 < nr) {
        // Row i spans y = nr-1-i .. nr-i: the line under it is at nr-1-i.
        let y = (nr - 1 - b.after) as f64;
        chart.draw_series(std::iter::once(PathElement::new(vec![(0.0, y), (nc as f64, y)], line_style(b)))).map_err(e)?;
    }
    for b in column_bounds.iter().filter(|b| b.after + 1 < nc) {
        let x = (b.after + 1) as f64;
        chart.draw_series(std::iter::once(PathElement::new(vec![(x, 0.0), (x, nr as f64)], line_style(b)))).map_err(e)?;
    }
    root.present().map_err(e)
}

/// One plot as an SVG document.
pub fn plot_svg(plot: &Plot) -> Result<String, ExportError> {
    plot_svg_legend(plot, true)
}

/// A plot without its legend, for a page that draws the legend beside it.
pub(super) fn plot_svg_without_legend(plot: &Plot) -> Result<String, ExportError> {
    plot_svg_legend(plot, false)
}

fn plot_svg_legend(plot: &Plot, with_legend: bool) -> Result<String, ExportError> {
    let mut svg = String::new();
    let r = match &plot.kind {
        PlotKind::Line { x_scale, series } => draw_line(plot, *x_scale, series, &mut svg),
        PlotKind::GroupedBars { groups, series } => draw_bars(plot, groups, series, with_legend, &mut svg).map(|hovers| with_hovers(&mut svg, &hovers)),
        PlotKind::Heatmap { rows, columns, values, higher_is_better, row_boundaries, column_boundaries } => {
            draw_heatmap(plot, rows, columns, values, *higher_is_better, (row_boundaries, column_boundaries), &mut svg)
        }
    };
    r.map_err(|reason| ExportError::Plot { plot: plot.name.clone(), reason })?;
    Ok(svg)
}

impl Exporter for SvgExporter {
    fn render(&self, doc: &Document) -> Result<Vec<Output>, ExportError> {
        let mut out = Vec::new();
        for v in &doc.views {
            if let View::Plot(p) = v {
                out.push(Output { file: Some(format!("{}.svg", p.name)), bytes: plot_svg(p)?.into_bytes() });
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::super::view::{Bar, Point, Series};
    use super::*;

    #[test]
    fn linear_ticks_keep_the_decimals_that_tell_them_apart() {
        let labels: Vec<String> = [0.005, 0.01, 0.015, 2.5, 3.0, 150.4].iter().map(|&v| tick_label(Scale::Linear, v)).collect();
        assert_eq!(labels, ["0.005", "0.01", "0.015", "2.5", "3", "150"]);
    }

    fn plot(kind: PlotKind) -> Plot {
        Plot { name: "p".into(), title: "a title".into(), x_label: "x axis".into(), y_label: "y axis".into(), kind }
    }

    #[test]
    fn line_plot_has_axes_legend_and_error_bars() {
        let p = plot(PlotKind::Line {
            x_scale: Scale::Log2Bytes,
            series: vec![Series {
                name: "mtlab fp".into(),
                points: vec![
                    Point { x: 65536.0, y: 10.0, low: Some(8.0), high: Some(12.0) },
                    Point { x: 131072.0, y: 5.0, low: None, high: None },
                ],
            }],
        });
        let svg = plot_svg(&p).unwrap();
        for want in ["a title", "x axis", "y axis", "mtlab fp", "64KiB", "<polyline"] {
            assert!(svg.contains(want), "{want} missing");
        }
    }

    #[test]
    fn bars_and_heatmap_draw_their_labels_and_values() {
        let bars = plot(PlotKind::GroupedBars {
            groups: vec!["1 CPU".into(), "2 CPUs".into()],
            series: vec![("glibc".into(), vec![Some(Bar { value: 3.0, low: Some(2.5), high: Some(3.5) }), None])],
        });
        let svg = plot_svg(&bars).unwrap();
        assert!(svg.contains("1 CPU") && svg.contains("2 CPUs") && svg.contains("glibc"), "{svg}");
        // Hovering a bar says its value; a missing bar has no box.
        assert_eq!(svg.matches("<title>").count(), 1, "{svg}");
        assert!(svg.contains("<title>glibc, 1 CPU: 3.000 [2.500, 3.500]</title>"), "{svg}");
        let tail = &svg[svg.find("class=\"bar-hover\"").unwrap()..];
        assert!(tail.trim_end().ends_with("</svg>"), "the boxes lie on top of the drawing");
        assert_eq!(bar_text("s", "g", &Bar { value: 12345.6, low: None, high: None }), "s, g: 12346");
        assert_eq!(bar_text("s", "g", &Bar { value: 0.0123456, low: None, high: None }), "s, g: 0.01235");
        let heat = plot(PlotKind::Heatmap {
            rows: vec!["cpu0".into(), "cpu1".into()],
            columns: vec!["app0".into(), "app1".into()],
            values: vec![vec![Some(20.5), Some(39.0)], vec![Some(38.0), None]],
            higher_is_better: true,
            row_boundaries: vec![],
            column_boundaries: vec![],
        });
        let svg = plot_svg(&heat).unwrap();
        for want in ["cpu0", "cpu1", "app0", "app1", "20.5", "39.0", "38.0"] {
            assert!(svg.contains(want), "{want} missing");
        }
        let lines = |svg: &str| svg.matches("<polyline").count();
        let mut bounded = heat.clone();
        if let PlotKind::Heatmap { row_boundaries, column_boundaries, .. } = &mut bounded.kind {
            // One strong line each way; a boundary after the last row or column is not drawn.
            *row_boundaries = vec![Boundary { after: 0, strong: true }, Boundary { after: 1, strong: true }];
            *column_boundaries = vec![Boundary { after: 0, strong: false }];
        }
        let with = plot_svg(&bounded).unwrap();
        assert_eq!(lines(&with), lines(&svg) + 2, "{with}");
        assert!(with.contains("stroke-width=\"3\""), "{with}");
    }
}
