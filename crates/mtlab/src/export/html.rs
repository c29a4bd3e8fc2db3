//! One self-contained HTML page of a document: notes as paragraphs (a
//! process's "══ … ══" line as a heading), tables sortable by a click on a
//! column, plots as inline SVG, and any images the caller adds (a flame
//! graph). It opens from disk: no network, no external file.

use std::fmt::Write;

use super::text::cell_text;
use super::view::{Cell, Document, Show, Table, View};
use super::{ExportError, Exporter, Output};

/// An image that is not a view (a flame graph from inferno): SVG text shown
/// as an `<img>`, so its own scripts never run inside the page.
pub struct Image {
    pub title: String,
    pub svg: String,
}

pub struct HtmlExporter {
    pub title: String,
    /// The file name `write_files` gives the page.
    pub file: String,
    pub images: Vec<Image>,
}

/// Escapes text for HTML element content and attribute values.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The number a cell sorts by, if it has one.
fn sort_key(c: &Cell) -> Option<f64> {
    match c {
        Cell::Int(i) => Some(*i as f64),
        Cell::Num(v, _) | Cell::Pct(v) | Cell::Ratio(v) => Some(*v),
        Cell::Bytes(b) => Some(*b as f64),
        Cell::Estimate { value, .. } => Some(*value),
        Cell::Empty | Cell::Text(_) => None,
    }
}

fn table_html(out: &mut String, t: &Table) {
    out.push_str("<section class=\"table\">");
    if !t.title.is_empty() {
        writeln!(out, "<h3>{}</h3>", escape(&t.title)).ok();
    }
    out.push_str("<div class=\"scroll\"><table class=\"sortable\"><thead><tr>");
    for (i, c) in t.columns.iter().enumerate() {
        let numeric = i >= t.numeric_from && !t.text_columns.contains(&i);
        writeln!(out, "<th{} title=\"sort by {}\">{}</th>", if numeric { " class=\"num\"" } else { "" }, escape(c), escape(c)).ok();
    }
    out.push_str("</tr></thead><tbody>\n");
    for row in &t.rows {
        out.push_str("<tr>");
        for (i, cell) in row.iter().enumerate() {
            let numeric = i >= t.numeric_from && !t.text_columns.contains(&i);
            let key = sort_key(cell).filter(|v| v.is_finite()).map(|v| format!(" data-v=\"{v}\"")).unwrap_or_default();
            write!(out, "<td{}{key}>{}</td>", if numeric { " class=\"num\"" } else { "" }, escape(&cell_text(cell))).ok();
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody></table></div></section>\n");
}

/// The page for `views`, titled `title`, with `images` after the views.
pub fn page(title: &str, views: &[View], images: &[Image]) -> Result<String, ExportError> {
    use base64::Engine;
    let mut body = String::new();
    let mut paragraph: Vec<String> = Vec::new();
    let flush = |body: &mut String, paragraph: &mut Vec<String>| {
        if !paragraph.is_empty() {
            writeln!(body, "<div class=\"notes\">{}</div>", paragraph.join("<br>\n")).ok();
            paragraph.clear();
        }
    };
    for v in views {
        match v {
            View::Note(n) if n.trim().is_empty() => flush(&mut body, &mut paragraph),
            View::Note(n) if n.starts_with("══") => {
                flush(&mut body, &mut paragraph);
                writeln!(body, "<h2>{}</h2>", escape(n.trim_matches(|c| c == '═' || c == ' '))).ok();
            }
            View::Note(n) => paragraph.extend(n.lines().map(escape)),
            View::Table(t) if t.show == Show::DataOnly => {}
            View::Table(t) => {
                flush(&mut body, &mut paragraph);
                table_html(&mut body, t);
            }
            View::Plot(p) => {
                flush(&mut body, &mut paragraph);
                let svg = super::svg::plot_svg(p)?;
                writeln!(body, "<figure class=\"plot\" id=\"plot-{}\">{svg}</figure>", escape(&p.name)).ok();
            }
        }
    }
    flush(&mut body, &mut paragraph);
    for img in images {
        let data = base64::engine::general_purpose::STANDARD.encode(img.svg.as_bytes());
        writeln!(
            body,
            "<figure class=\"image\"><figcaption>{}</figcaption><img alt=\"{}\" src=\"data:image/svg+xml;base64,{data}\"></figure>",
            escape(&img.title),
            escape(&img.title)
        )
        .ok();
    }
    Ok(format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{t}</title><style>{STYLE}</style></head>\n<body><main>\n<h1>{t}</h1>\n{body}\
         <footer>written by mtlab {v}; click a column's name to sort a table by it</footer>\n</main>\
         <script>{SCRIPT}</script></body></html>\n",
        t = escape(title),
        v = env!("CARGO_PKG_VERSION"),
    ))
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:0;color:#111;background:#fff}\
main{max-width:1280px;margin:0 auto;padding:1rem 1.5rem}\
h1{font-size:1.4rem}h2{font-size:1.2rem;margin-top:2rem;border-bottom:1px solid #ccc}h3{font-size:1rem;margin:1.2rem 0 .4rem}\
.notes{margin:.6rem 0;line-height:1.45;font-size:.92rem;overflow-wrap:anywhere}\
.scroll{overflow-x:auto;max-width:100%}\
table{border-collapse:collapse;font-size:.85rem}th,td{padding:.2rem .6rem;border-bottom:1px solid #e4e4e4;vertical-align:top}\
th{background:#f3f3f3;cursor:pointer;user-select:none;position:sticky;top:0;min-width:3.5rem}\
th[aria-sort=ascending]::after{content:' \\25B2'}th[aria-sort=descending]::after{content:' \\25BC'}\
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}td.num{white-space:nowrap}\
tbody tr:nth-child(even){background:#fafafa}\
figure{margin:1rem 0}figure svg,figure img{max-width:100%;height:auto;border:1px solid #eee}\
figcaption{font-weight:600;margin-bottom:.3rem}footer{margin:2rem 0 1rem;color:#666;font-size:.8rem}";

const SCRIPT: &str = "document.querySelectorAll('table.sortable').forEach(function(t){\
var hs=t.tHead.rows[0].cells;\
Array.prototype.forEach.call(hs,function(h,i){h.addEventListener('click',function(){\
var asc=h.getAttribute('aria-sort')!=='ascending';\
Array.prototype.forEach.call(hs,function(o){o.removeAttribute('aria-sort')});\
h.setAttribute('aria-sort',asc?'ascending':'descending');\
var b=t.tBodies[0],rows=Array.prototype.slice.call(b.rows);\
rows.sort(function(x,y){var a=x.cells[i],c=y.cells[i];if(!a||!c)return 0;\
var av=a.getAttribute('data-v'),cv=c.getAttribute('data-v'),r;\
if(av!==null&&cv!==null){r=parseFloat(av)-parseFloat(cv)}else if(av!==null){r=-1}else if(cv!==null){r=1}\
else{r=a.textContent.localeCompare(c.textContent)}return asc?r:-r});\
rows.forEach(function(r){b.appendChild(r)})})})});\
document.body.setAttribute('data-ready','1');";

impl Exporter for HtmlExporter {
    fn render(&self, doc: &Document) -> Result<Vec<Output>, ExportError> {
        Ok(vec![Output { file: Some(self.file.clone()), bytes: page(&self.title, &doc.views, &self.images)?.into_bytes() }])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::view::{Plot, PlotKind, Point, Scale, Series};

    #[test]
    fn a_page_holds_every_shown_view_escaped_and_nothing_external() {
        let mut t = Table::new("t", "sizes <b>", &["site", "bytes"], 1);
        t.push(vec![Cell::text("a&b"), Cell::Bytes(2048)]);
        let hidden = Table::new("raw", "raw rows", &["x"], 1).data_only();
        let plot = Plot {
            name: "mem".into(),
            title: "memory".into(),
            x_label: "s".into(),
            y_label: "MiB".into(),
            kind: PlotKind::Line {
                x_scale: Scale::Linear,
                series: vec![Series { name: "live".into(), points: vec![Point { x: 0.0, y: 1.0, low: None, high: None }, Point { x: 1.0, y: 2.0, low: None, high: None }] }],
            },
        };
        let views = vec![View::Note("══ process 7 — prog ══".into()), View::Note("a <note>".into()), View::Table(t), View::Table(hidden), View::Plot(plot)];
        let html = page("report of x<y", &views, &[Image { title: "flame".into(), svg: "<svg xmlns=\"http://www.w3.org/2000/svg\"/>".into() }]).unwrap();
        assert!(html.starts_with("<!DOCTYPE html>"));
        assert!(html.contains("<title>report of x&lt;y</title>"));
        assert!(html.contains("<h2>process 7 — prog</h2>"));
        assert!(html.contains("a &lt;note&gt;"));
        assert!(html.contains("<h3>sizes &lt;b&gt;</h3>"));
        assert!(html.contains("<td>a&amp;b</td><td class=\"num\" data-v=\"2048\">2.0 KiB</td>"), "{html}");
        assert!(!html.contains("raw rows"), "data-only tables stay out");
        assert!(html.contains("<figure class=\"plot\" id=\"plot-mem\"><svg"));
        assert!(html.contains("src=\"data:image/svg+xml;base64,"));
        for external in ["src=\"http", "href=\"http", "<link", "url(http", "src=\"/", "@import"] {
            assert!(!html.contains(external), "no external resource ({external})");
        }
    }
}
