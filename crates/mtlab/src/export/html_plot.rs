//! Plots drawn for the HTML page (the `--svg` files stay plotters'): line
//! plots as small multiples (one family of series per panel, one shared
//! y axis, the legend beside the panels, values on hover from the page's
//! script), heat maps as tables of coloured cells with their colour scale
//! and which way is better, grouped bars with their legend outside.

use std::fmt::Write;

use super::html::escape;
use super::svg::{axis_value, span, tick_label};
use super::view::{Boundary, Plot, Scale, Series};
use super::ExportError;

const COLORS: [&str; 8] = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"];

/// Points a hover reads per series: a longer series is thinned evenly.
const HOVER_POINTS: usize = 600;

/// Series per panel above which a plot is split into small multiples.
const MAX_SERIES_PER_PANEL: usize = 3;

/// The panels of a line plot: `(panel title, series)`. Up to
/// `MAX_SERIES_PER_PANEL` series stay in one panel; more are grouped by
/// their first word (`glibc live`, `glibc mapped` → panel `glibc`) when that
/// makes panels of a few series each, else one panel per series.
fn panels(series: &[Series]) -> Vec<(String, Vec<&Series>)> {
    if series.len() <= MAX_SERIES_PER_PANEL {
        return vec![(String::new(), series.iter().collect())];
    }
    let mut groups: Vec<(String, Vec<&Series>)> = Vec::new();
    for s in series {
        let head = s.name.split_whitespace().next().unwrap_or("").to_string();
        match groups.iter_mut().find(|(h, _)| *h == head) {
            Some((_, g)) => g.push(s),
            None => groups.push((head, vec![s])),
        }
    }
    if groups.len() >= 2 && groups.iter().all(|(_, g)| g.len() <= MAX_SERIES_PER_PANEL) {
        return groups;
    }
    series.iter().map(|s| (s.name.clone(), vec![s])).collect()
}

/// The part of a series' name that names its colour, the same in every
/// panel (`glibc live` in panel `glibc` → `live`).
fn role<'a>(panel: &str, name: &'a str) -> &'a str {
    if panel.is_empty() {
        return name;
    }
    let rest = name.strip_prefix(panel).map(str::trim).unwrap_or(name);
    if rest.is_empty() { name } else { rest }
}

/// About five round ticks between `lo` and `hi`.
fn ticks(lo: f64, hi: f64) -> Vec<f64> {
    if hi.is_nan() || lo.is_nan() || hi <= lo {
        return vec![lo];
    }
    let raw = (hi - lo) / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0].iter().map(|m| m * mag).find(|s| *s >= raw).unwrap_or(raw);
    let mut v = (lo / step).ceil() * step;
    let mut out = Vec::new();
    while v <= hi + step * 1e-9 && out.len() < 20 {
        out.push(if v.abs() < step * 1e-9 { 0.0 } else { v });
        v += step;
    }
    out
}

fn x_ticks(scale: Scale, lo: f64, hi: f64) -> Vec<f64> {
    match scale {
        Scale::Linear => ticks(lo, hi),
        Scale::Log2 | Scale::Log2Bytes => {
            let (a, b) = (lo.ceil() as i64, hi.floor() as i64);
            let stride = ((b - a) / 8 + 1).max(1);
            (a..=b).step_by(stride as usize).map(|v| v as f64).collect()
        }
    }
}

fn y_label(v: f64) -> String {
    if v.abs() >= 1e6 {
        format!("{v:.3e}")
    } else {
        tick_label(Scale::Linear, v)
    }
}

/// A line plot as its panels, a legend outside them, and the data the
/// page's script reads for hover values (`data-hover` on each panel).
pub fn line_figure(plot: &Plot, x_scale: Scale, series: &[Series]) -> Result<String, ExportError> {
    let panels = panels(series);
    let small = panels.len() > 1;
    let (w, h) = if small { (420.0, 210.0) } else { (860.0, 300.0) };
    let (l, r, t, b) = (64.0, 14.0, 10.0, 38.0);
    let xs = series.iter().flat_map(|s| s.points.iter().map(|p| axis_value(x_scale, p.x)));
    let (x0, x1) = span(xs, false);
    let ys = series.iter().flat_map(|s| s.points.iter().flat_map(|p| [Some(p.y), p.low, p.high]).flatten());
    let (y0, y1) = span(ys, true);
    // Colours by role, in order of first appearance: the same role is the same colour in every panel.
    let mut roles: Vec<String> = Vec::new();
    for (title, ss) in &panels {
        for s in ss {
            let r = role(title, &s.name).to_string();
            if !roles.contains(&r) {
                roles.push(r);
            }
        }
    }
    let color = |r: &str| COLORS[roles.iter().position(|x| x == r).unwrap_or(0) % COLORS.len()];
    let px = |x: f64| l + (x - x0) / (x1 - x0) * (w - l - r);
    let py = |y: f64| t + (1.0 - (y - y0) / (y1 - y0)) * (h - t - b);
    let mut out = String::new();
    writeln!(out, "<figure class=\"plot line\" id=\"plot-{}\"><figcaption>{}</figcaption><div class=\"panels{}\">", escape(&plot.name), escape(&plot.title), if small { " small" } else { "" }).ok();
    for (title, ss) in &panels {
        let mut hover = serde_json::json!({
            "x0": x0, "x1": x1, "y0": y0, "y1": y1, "l": l, "r": r, "t": t, "b": b, "w": w, "h": h,
            "xs": match x_scale { Scale::Linear => "lin", Scale::Log2 => "log2", Scale::Log2Bytes => "log2bytes" },
            "xl": plot.x_label, "yl": plot.y_label, "s": []
        });
        let mut svg = String::new();
        write!(svg, "<svg class=\"panel\" viewBox=\"0 0 {w} {h}\" width=\"{w}\" height=\"{h}\" role=\"img\" aria-label=\"{}\">", escape(if title.is_empty() { &plot.title } else { title })).ok();
        // Axes, grid and tick labels.
        for v in ticks(y0, y1) {
            let y = py(v);
            write!(svg, "<line class=\"grid\" x1=\"{l}\" x2=\"{}\" y1=\"{y:.1}\" y2=\"{y:.1}\"/><text class=\"tick\" x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>", w - r, l - 5.0, y + 4.0, y_label(v)).ok();
        }
        for v in x_ticks(x_scale, x0, x1) {
            let x = px(v);
            write!(svg, "<line class=\"grid\" x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{t}\" y2=\"{}\"/><text class=\"tick\" x=\"{x:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>", h - b, h - b + 15.0, escape(&tick_label(x_scale, v))).ok();
        }
        write!(svg, "<rect class=\"frame\" x=\"{l}\" y=\"{t}\" width=\"{}\" height=\"{}\"/>", w - l - r, h - t - b).ok();
        write!(svg, "<text class=\"axis\" x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>", l + (w - l - r) / 2.0, h - 4.0, escape(&plot.x_label)).ok();
        write!(svg, "<text class=\"axis\" transform=\"translate(13 {}) rotate(-90)\" text-anchor=\"middle\">{}</text>", t + (h - t - b) / 2.0, escape(&plot.y_label)).ok();
        if !title.is_empty() && small {
            write!(svg, "<text class=\"ptitle\" x=\"{}\" y=\"{}\">{}</text>", l + 6.0, t + 14.0, escape(title)).ok();
        }
        for s in ss {
            let c = color(role(title, &s.name));
            let pts: Vec<(f64, f64)> = s.points.iter().map(|p| (px(axis_value(x_scale, p.x)), py(p.y))).collect();
            let path: Vec<String> = pts.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
            write!(svg, "<polyline fill=\"none\" stroke=\"{c}\" stroke-width=\"2\" points=\"{}\"><title>{}</title></polyline>", path.join(" "), escape(&s.name)).ok();
            if pts.len() <= 60 {
                for (x, y) in &pts {
                    write!(svg, "<circle cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"3\" fill=\"{c}\"/>").ok();
                }
            }
            for p in &s.points {
                if let (Some(lo), Some(hi)) = (p.low, p.high) {
                    let x = px(axis_value(x_scale, p.x));
                    write!(svg, "<line stroke=\"{c}\" x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{:.1}\" y2=\"{:.1}\"/>", py(lo), py(hi)).ok();
                }
            }
            let stride = s.points.len().div_ceil(HOVER_POINTS).max(1);
            let p: Vec<[f64; 3]> = s.points.iter().step_by(stride).map(|p| [axis_value(x_scale, p.x), p.x, p.y]).collect();
            if let Some(a) = hover["s"].as_array_mut() {
                a.push(serde_json::json!({"n": s.name, "c": c, "p": p}));
            }
        }
        svg.push_str("</svg>");
        let data = serde_json::to_string(&hover).map_err(|e| ExportError::Encode(e.to_string()))?;
        writeln!(out, "<div class=\"hover\" data-hover=\"{}\">{svg}</div>", escape(&data)).ok();
    }
    out.push_str("</div><ul class=\"legend\">");
    for r in &roles {
        write!(out, "<li><span class=\"swatch\" style=\"background:{}\"></span>{}</li>", color(r), escape(r)).ok();
    }
    out.push_str("</ul></figure>\n");
    Ok(out)
}

/// White to dark blue as the value gets better (`t` from worst 0 to best 1),
/// as the SVG heat maps.
fn heat(t: f64) -> String {
    let c = super::svg::heat(t, true);
    format!("#{:02x}{:02x}{:02x}", c.0, c.1, c.2)
}

/// A heat map as a table of coloured cells (the value in each, row and
/// column on hover), under it its colour scale from worst to best with the
/// measured range, and which way is better.
pub fn heatmap_figure(
    plot: &Plot,
    rows: &[String],
    columns: &[String],
    values: &[Vec<Option<f64>>],
    higher_is_better: bool,
    (row_bounds, column_bounds): (&[Boundary], &[Boundary]),
) -> String {
    let all: Vec<f64> = values.iter().flatten().flatten().copied().filter(|v| v.is_finite()).collect();
    let lo = all.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = all.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let better = |v: f64| {
        let t = if hi > lo { (v - lo) / (hi - lo) } else { 0.5 };
        if higher_is_better { t } else { 1.0 - t }
    };
    let label = |v: f64| if v.abs() >= 100.0 { format!("{v:.0}") } else { format!("{v:.1}") };
    let line = |bs: &[Boundary], i: usize| bs.iter().find(|b| b.after == i).map(|b| if b.strong { " strong" } else { " light" }).unwrap_or("");
    let mut out = String::new();
    writeln!(out, "<figure class=\"plot heatmap\" id=\"plot-{}\"><figcaption>{}</figcaption>", escape(&plot.name), escape(&plot.title)).ok();
    write!(out, "<p class=\"axes\">rows: {}; columns: {}</p><table class=\"heat\"><thead><tr><th></th>", escape(&plot.y_label), escape(&plot.x_label)).ok();
    for (ci, c) in columns.iter().enumerate() {
        write!(out, "<th class=\"col{}\">{}</th>", line(column_bounds, ci), escape(c)).ok();
    }
    out.push_str("</tr></thead><tbody>");
    for (ri, (name, row)) in rows.iter().zip(values).enumerate() {
        write!(out, "<tr class=\"row{}\"><th>{}</th>", line(row_bounds, ri), escape(name)).ok();
        for (ci, v) in row.iter().enumerate() {
            let class = format!("col{}", line(column_bounds, ci));
            match v.filter(|v| v.is_finite()) {
                Some(v) => {
                    let t = better(v);
                    let ink = if t > 0.55 { "#fff" } else { "#111" };
                    write!(
                        out,
                        "<td class=\"{class}\" data-v=\"{v}\" style=\"background:{};color:{ink}\" title=\"{} {} × {} {}: {}\">{}</td>",
                        heat(t),
                        escape(&plot.y_label),
                        escape(name),
                        escape(&plot.x_label),
                        escape(&columns[ci.min(columns.len().saturating_sub(1))]),
                        label(v),
                        label(v)
                    )
                    .ok();
                }
                None => {
                    write!(out, "<td class=\"{class} none\" title=\"not measured\"></td>").ok();
                }
            }
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table>");
    if !all.is_empty() {
        let (worst, best) = if higher_is_better { (lo, hi) } else { (hi, lo) };
        write!(
            out,
            "<div class=\"scale\"><span>{} (worst)</span><span class=\"bar\" style=\"background:linear-gradient(to right,{},{})\"></span><span>{} (best)</span></div>\
             <p class=\"better\">darker is better: {} values are better here</p>",
            label(worst),
            heat(0.0),
            heat(1.0),
            label(best),
            if higher_is_better { "higher" } else { "lower" }
        )
        .ok();
    }
    out.push_str("</figure>\n");
    out
}

/// Grouped bars: plotters' drawing without its legend, the legend beside it.
pub fn bars_figure(plot: &Plot, series: &[(String, Vec<Option<super::view::Bar>>)]) -> Result<String, ExportError> {
    let svg = super::svg::plot_svg_without_legend(plot)?;
    let mut out = String::new();
    write!(out, "<figure class=\"plot bars\" id=\"plot-{}\">{svg}<ul class=\"legend\">", escape(&plot.name)).ok();
    for (i, (name, _)) in series.iter().enumerate() {
        write!(out, "<li><span class=\"swatch\" style=\"background:{}\"></span>{}</li>", super::svg::color_hex(i), escape(name)).ok();
    }
    out.push_str("</ul></figure>\n");
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::view::{PlotKind, Point};

    fn series(name: &str) -> Series {
        Series { name: name.into(), points: vec![Point { x: 1.0, y: 2.0, low: None, high: None }, Point { x: 2.0, y: 5.0, low: None, high: None }] }
    }

    #[test]
    fn eight_series_become_one_panel_per_family_with_one_colour_per_role() {
        let names = ["glibc live", "glibc mapped", "jemalloc live", "jemalloc mapped", "tcmalloc live", "tcmalloc mapped", "mimalloc live", "mimalloc mapped"];
        let ss: Vec<Series> = names.iter().map(|n| series(n)).collect();
        let p = panels(&ss);
        assert_eq!(p.iter().map(|(t, g)| (t.as_str(), g.len())).collect::<Vec<_>>(), [("glibc", 2), ("jemalloc", 2), ("tcmalloc", 2), ("mimalloc", 2)]);
        let plot = Plot { name: "m".into(), title: "memory".into(), x_label: "events".into(), y_label: "MiB".into(), kind: PlotKind::Line { x_scale: Scale::Linear, series: ss.clone() } };
        let html = line_figure(&plot, Scale::Linear, &ss).unwrap();
        assert_eq!(html.matches("<svg class=\"panel\"").count(), 4);
        assert_eq!(html.matches("<li>").count(), 2, "legend: live and mapped, outside the panels: {html}");
        assert_eq!(html.matches("stroke=\"#1f77b4\"").count(), 4, "live is the same colour in every panel");
        assert!(html.contains("data-hover=\""));
        // Three series or fewer share one panel; eight without families get one each.
        assert_eq!(panels(&ss[..3]).len(), 1);
        let lone: Vec<Series> = (0..5).map(|i| series(&format!("s{i}"))).collect();
        assert_eq!(panels(&lone).len(), 5);
    }

    #[test]
    fn a_heatmap_says_which_way_is_better_and_colours_the_best_darkest() {
        let plot = Plot { name: "h".into(), title: "ms per GB".into(), x_label: "app core".into(), y_label: "flow core".into(), kind: PlotKind::Line { x_scale: Scale::Linear, series: vec![] } };
        let html = heatmap_figure(&plot, &["0".into(), "1".into()], &["0".into(), "1".into()], &[vec![Some(10.0), Some(20.0)], vec![None, Some(40.0)]], false, (&[], &[]));
        assert!(html.contains("lower values are better"), "{html}");
        assert!(html.contains("40.0 (worst)") && html.contains("10.0 (best)"), "{html}");
        assert!(html.contains(&format!("data-v=\"10\" style=\"background:{}", heat(1.0))), "lowest is darkest: {html}");
        assert!(html.contains("not measured"));
        assert_eq!(ticks(0.0, 10.0), [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
    }
}
