//! One self-contained HTML page of a document. It opens on a summary (what
//! a person asks first) and the contents; then each section (a "══ … ══"
//! note starts one) with its notes, tables sortable by a click on a column,
//! plots (`html_plot.rs`) and flame graphs. A flame graph is the call tree as
//! data, drawn by the page's own script: click to zoom, search, hover for
//! the values, switch between allocated and in-use bytes and objects. The
//! page opens from disk: no network, no external file.

use std::fmt::Write;

use base64::Engine;

use super::flame::{FlameGraph, VALUE_NAMES};
use super::text::cell_text;
use super::view::{Cell, Document, PlotKind, Show, Table, View};
use super::{ExportError, Exporter, Output};

/// What a page says first: `(what, value)` lines and the warnings.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    pub items: Vec<(String, String)>,
    pub warnings: Vec<String>,
}

/// A drawing made elsewhere (an SVG document), shown as it is at the end of
/// the page: `report --diff`'s differential flame graphs.
#[derive(Debug, Clone)]
pub struct Image {
    pub title: String,
    pub svg: String,
}

/// What a page holds besides the document's views.
#[derive(Debug, Clone, Default)]
pub struct Extras {
    pub summary: Option<Summary>,
    pub flames: Vec<FlameGraph>,
    pub images: Vec<Image>,
}

pub struct HtmlExporter {
    pub title: String,
    /// The file name `write_files` gives the page.
    pub file: String,
    pub extras: Extras,
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

/// A section of the page: its heading (none for what comes before the
/// first) and its HTML.
struct Section {
    heading: Option<String>,
    body: String,
}

/// The sections of `views`, each plot drawn for the page and consecutive
/// heat maps in one grid.
fn sections(views: &[View]) -> Result<Vec<Section>, ExportError> {
    let mut out = vec![Section { heading: None, body: String::new() }];
    let mut paragraph: Vec<String> = Vec::new();
    let mut in_grid = false;
    for v in views {
        let is_heatmap = matches!(v, View::Plot(p) if matches!(p.kind, PlotKind::Heatmap { .. }));
        let plain_note = matches!(v, View::Note(n) if !n.trim().is_empty() && !n.starts_with("══"));
        let hidden = matches!(v, View::Table(t) if t.show == Show::DataOnly);
        let body = &mut out.last_mut().expect("one section at least").body;
        if !plain_note && !hidden {
            // Notes before a heat map of the grid stay in the grid; anything else closes it.
            if in_grid && !is_heatmap {
                body.push_str("</div>\n");
                in_grid = false;
            }
            if !paragraph.is_empty() {
                writeln!(body, "<div class=\"notes\">{}</div>", paragraph.join("<br>\n")).ok();
                paragraph.clear();
            }
        }
        match v {
            View::Note(n) if n.trim().is_empty() => {}
            View::Note(n) if n.starts_with("══") => {
                out.push(Section { heading: Some(n.trim_matches(|c| c == '═' || c == ' ').to_string()), body: String::new() });
            }
            View::Note(n) => paragraph.extend(n.lines().map(escape)),
            View::Table(t) if t.show == Show::DataOnly => {}
            View::Table(t) => table_html(body, t),
            View::Plot(p) => match &p.kind {
                PlotKind::Line { x_scale, series } => body.push_str(&super::html_plot::line_figure(p, *x_scale, series)?),
                PlotKind::GroupedBars { series, .. } => body.push_str(&super::html_plot::bars_figure(p, series)?),
                PlotKind::Heatmap { rows, columns, values, higher_is_better, row_boundaries, column_boundaries } => {
                    if !in_grid {
                        body.push_str("<div class=\"heatgrid\">\n");
                        in_grid = true;
                    }
                    body.push_str(&super::html_plot::heatmap_figure(p, rows, columns, values, *higher_is_better, (row_boundaries, column_boundaries)));
                }
            },
        }
    }
    let body = &mut out.last_mut().expect("one section at least").body;
    if in_grid {
        body.push_str("</div>\n");
    }
    if !paragraph.is_empty() {
        writeln!(body, "<div class=\"notes\">{}</div>", paragraph.join("<br>\n")).ok();
    }
    Ok(out)
}

/// A flame graph's figure: its controls, the tree as JSON for the script,
/// and what was left out.
fn flame_html(out: &mut String, f: &FlameGraph, index: usize) -> Result<(), ExportError> {
    let data = serde_json::to_string(&f.root).map_err(|e| ExportError::Encode(e.to_string()))?;
    // The JSON sits in a <script> element: "</" would end it.
    let data = data.replace("</", "<\\/");
    write!(out, "<figure class=\"flame\" id=\"flame-{index}\"><figcaption>{}</figcaption><div class=\"fg-bar\"><label>show <select class=\"fg-value\">", escape(&f.title)).ok();
    for (i, name) in VALUE_NAMES.iter().enumerate() {
        write!(out, "<option value=\"{i}\"{}>{name}</option>", if i == f.first_value { " selected" } else { "" }).ok();
    }
    out.push_str(
        "</select></label> <input class=\"fg-search\" type=\"search\" placeholder=\"search functions\" aria-label=\"search functions\"> \
         <button type=\"button\" class=\"fg-reset\">whole graph</button> <span class=\"fg-status\"></span></div>\
         <div class=\"fg-chart\"></div>",
    );
    let mut notes = vec!["callers above callees; click a frame to zoom into it, hover for its values".to_string()];
    if f.estimated {
        notes.push("values are estimates from a sampled profile".into());
    }
    if f.left_out > 0 {
        notes.push(format!("{} smaller frames left out to keep the page small; their values stay in their callers", f.left_out));
    }
    writeln!(out, "<p class=\"fg-note\">{}</p><script type=\"application/json\" class=\"fg-data\">{data}</script></figure>", escape(&notes.join("; "))).ok();
    Ok(())
}

fn summary_html(out: &mut String, s: &Summary) {
    out.push_str("<section id=\"summary\"><h2>Summary</h2><dl>");
    for (k, v) in &s.items {
        write!(out, "<div><dt>{}</dt><dd>{}</dd></div>", escape(k), escape(v)).ok();
    }
    out.push_str("</dl>");
    if s.warnings.is_empty() {
        out.push_str("<p class=\"ok\">no warnings</p>");
    } else {
        out.push_str("<ul class=\"warnings\">");
        for w in &s.warnings {
            write!(out, "<li>warning: {}</li>", escape(w)).ok();
        }
        out.push_str("</ul>");
    }
    out.push_str("</section>\n");
}

/// The page for `views`, titled `title`: the summary and contents first,
/// each flame graph at the end of its section.
pub fn page(title: &str, views: &[View], extras: &Extras) -> Result<String, ExportError> {
    let mut secs = sections(views)?;
    for (i, f) in extras.flames.iter().enumerate() {
        let at = f
            .section
            .as_ref()
            .and_then(|want| secs.iter().position(|s| s.heading.as_ref().is_some_and(|h| h.contains(want.as_str()))))
            .unwrap_or(secs.len() - 1);
        flame_html(&mut secs[at].body, f, i)?;
    }
    if let Some(last) = secs.last_mut() {
        for img in &extras.images {
            // As an <img> of a data URI: the drawing's own script and ids stay out of the page's.
            let data = base64::engine::general_purpose::STANDARD.encode(img.svg.as_bytes());
            writeln!(
                last.body,
                "<figure class=\"image\"><figcaption>{t}</figcaption><img alt=\"{t}\" src=\"data:image/svg+xml;base64,{data}\"></figure>",
                t = escape(&img.title)
            )
            .ok();
        }
    }
    let mut body = String::new();
    if let Some(s) = &extras.summary {
        summary_html(&mut body, s);
    }
    let headed: Vec<(usize, &String)> = secs.iter().enumerate().filter_map(|(i, s)| Some((i, s.heading.as_ref()?))).collect();
    if headed.len() >= 2 {
        body.push_str("<nav id=\"contents\"><h2>Contents</h2><ol>");
        for (i, h) in &headed {
            write!(body, "<li><a href=\"#s{i}\">{}</a></li>", escape(h)).ok();
        }
        body.push_str("</ol></nav>\n");
    }
    for (i, s) in secs.iter().enumerate() {
        if let Some(h) = &s.heading {
            writeln!(body, "<section class=\"part\"><h2 id=\"s{i}\">{}</h2>", escape(h)).ok();
        } else {
            body.push_str("<section class=\"part\">\n");
        }
        body.push_str(&s.body);
        body.push_str("</section>\n");
    }
    Ok(format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{t}</title><style>{STYLE}</style></head>\n<body><main>\n<h1>{t}</h1>\n{body}\
         <footer>written by mtlab {v}; click a column's name to sort a table by it; hover a plot for its values</footer>\n</main>\
         <div id=\"tip\" hidden></div><script>{SCRIPT}</script></body></html>\n",
        t = escape(title),
        v = env!("CARGO_PKG_VERSION"),
    ))
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:0;color:#111;background:#fff}\
main{max-width:1280px;margin:0 auto;padding:1rem 1.5rem}\
h1{font-size:1.4rem}h2{font-size:1.2rem;margin-top:2rem;border-bottom:1px solid #ccc}h3{font-size:1rem;margin:1.2rem 0 .4rem}\
#summary dl{display:grid;grid-template-columns:repeat(auto-fill,minmax(15rem,1fr));gap:.6rem;margin:.5rem 0}\
#summary dl div{border:1px solid #ddd;border-radius:6px;padding:.5rem .7rem;background:#fafbfc}\
#summary dt{font-size:.8rem;color:#555}#summary dd{margin:0;font-size:1.05rem;font-weight:600;overflow-wrap:anywhere}\
.warnings li{color:#8a1c00}.ok{color:#2a6a2a}#contents ol{columns:2;font-size:.92rem}\
.notes{margin:.6rem 0;line-height:1.45;font-size:.92rem;overflow-wrap:anywhere}\
.scroll{overflow-x:auto;max-width:100%}\
table{border-collapse:collapse;font-size:.85rem}th,td{padding:.2rem .6rem;border-bottom:1px solid #e4e4e4;vertical-align:top}\
table.sortable th{background:#f3f3f3;cursor:pointer;user-select:none;position:sticky;top:0;min-width:3.5rem}\
th[aria-sort=ascending]::after{content:' \\25B2'}th[aria-sort=descending]::after{content:' \\25BC'}\
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}td.num{white-space:nowrap}\
table.sortable tbody tr:nth-child(even){background:#fafafa}\
figure{margin:1rem 0}figure svg{max-width:100%;height:auto}figcaption{font-weight:600;margin-bottom:.3rem}\
.panels{display:flex;flex-wrap:wrap;gap:.5rem}.hover{position:relative}\
.panel .grid{stroke:#e6e6e6}.panel .frame{fill:none;stroke:#999}.panel text{font-size:11px;fill:#333}\
.panel .axis{font-size:12px}.panel .ptitle{font-size:13px;font-weight:600}.panel .guide{stroke:#555;stroke-dasharray:3 3}\
.legend{list-style:none;padding:0;margin:.3rem 0;display:flex;flex-wrap:wrap;gap:1rem;font-size:.85rem}\
.swatch{display:inline-block;width:14px;height:10px;margin-right:.35rem;vertical-align:middle}\
.heatgrid{display:grid;grid-template-columns:repeat(auto-fill,minmax(340px,1fr));gap:1rem}\
table.heat td{text-align:center;min-width:2.6rem;border:1px solid #fff;font-variant-numeric:tabular-nums}\
table.heat td.none{background:#e6e6e6}table.heat th{font-weight:500;font-size:.8rem;background:none}\
p.axes{font-size:.8rem;color:#555;margin:.2rem 0}\
table.heat .strong{border-right:3px solid #000}table.heat tr.strong td,table.heat tr.strong th{border-bottom:3px solid #000}\
table.heat .light{border-right:1px solid #666}table.heat tr.light td{border-bottom:1px solid #666}\
.scale{display:flex;align-items:center;gap:.4rem;font-size:.8rem}.scale .bar{width:9rem;height:.8rem;border:1px solid #ccc}\
.better{font-size:.8rem;margin:.2rem 0;color:#333}\
.flame{border:1px solid #ddd;border-radius:6px;padding:.6rem}.fg-bar{display:flex;gap:.6rem;align-items:center;flex-wrap:wrap;font-size:.85rem;margin-bottom:.4rem}\
.fg-status{color:#444}.fg-chart{position:relative;overflow:hidden;font-size:11px;min-height:20px}\
.fg-node{position:absolute;height:17px;line-height:17px;padding:0 3px;box-sizing:border-box;overflow:hidden;white-space:nowrap;\
text-overflow:ellipsis;border-right:1px solid #fff;border-bottom:1px solid #fff;cursor:pointer;color:#111}\
.fg-node.anc{opacity:.6}.fg-node.match{background:#e040fb!important;color:#fff}.fg-node.dim{opacity:.35}\
.fg-note{font-size:.8rem;color:#555;margin:.3rem 0 0}\
#tip{position:fixed;z-index:10;background:#fffff0;border:1px solid #888;padding:.3rem .5rem;font-size:.8rem;pointer-events:none;\
white-space:pre;max-width:40rem;overflow:hidden;box-shadow:0 1px 4px rgba(0,0,0,.2)}\
footer{margin:2rem 0 1rem;color:#666;font-size:.8rem}";

const SCRIPT: &str = r#"(function(){
var tip=document.getElementById('tip');
function showTip(text,ev){tip.textContent=text;tip.hidden=false;
var x=ev.clientX+14,y=ev.clientY+14,w=tip.offsetWidth,h=tip.offsetHeight;
if(x+w>window.innerWidth)x=Math.max(0,ev.clientX-w-10);if(y+h>window.innerHeight)y=Math.max(0,ev.clientY-h-10);
tip.style.left=x+'px';tip.style.top=y+'px'}
function hideTip(){tip.hidden=true}
function bytes(b){var u=['B','KiB','MiB','GiB','TiB'],i=0;while(b>=1024&&i<u.length-1){b/=1024;i++}return i?b.toFixed(1)+' '+u[i]:Math.round(b)+' B'}
function count(n){return Math.round(n).toLocaleString('en-US')}
function num(v){return Math.abs(v)>=100?v.toFixed(0):Math.abs(v)>=1?v.toFixed(2):v.toPrecision(3)}

document.querySelectorAll('table.sortable').forEach(function(t){
var hs=t.tHead.rows[0].cells;
Array.prototype.forEach.call(hs,function(h,i){h.addEventListener('click',function(){
var asc=h.getAttribute('aria-sort')!=='ascending';
Array.prototype.forEach.call(hs,function(o){o.removeAttribute('aria-sort')});
h.setAttribute('aria-sort',asc?'ascending':'descending');
var b=t.tBodies[0],rows=Array.prototype.slice.call(b.rows);
rows.sort(function(x,y){var a=x.cells[i],c=y.cells[i];if(!a||!c)return 0;
var av=a.getAttribute('data-v'),cv=c.getAttribute('data-v'),r;
if(av!==null&&cv!==null){r=parseFloat(av)-parseFloat(cv)}else if(av!==null){r=-1}else if(cv!==null){r=1}
else{r=a.textContent.localeCompare(c.textContent)}return asc?r:-r});
rows.forEach(function(r){b.appendChild(r)})})})});

document.querySelectorAll('div.hover').forEach(function(div){
var d=JSON.parse(div.getAttribute('data-hover')),svg=div.querySelector('svg');
var guide=document.createElementNS('http://www.w3.org/2000/svg','line');guide.setAttribute('class','guide');
guide.setAttribute('y1',d.t);guide.setAttribute('y2',d.h-d.b);guide.style.display='none';svg.appendChild(guide);
function fx(x){return d.xs==='log2bytes'?bytes(x):num(x)}
svg.addEventListener('mousemove',function(ev){var r=svg.getBoundingClientRect();
var px=(ev.clientX-r.left)*d.w/r.width;if(px<d.l||px>d.w-d.r){guide.style.display='none';hideTip();return}
var ax=d.x0+(px-d.l)/(d.w-d.l-d.r)*(d.x1-d.x0),lines=[],at=null;
d.s.forEach(function(s){var best=null;s.p.forEach(function(p){if(best===null||Math.abs(p[0]-ax)<Math.abs(best[0]-ax))best=p});
if(best){if(at===null)at=best;lines.push(s.n+': '+num(best[2])+' '+d.yl)}});
if(at===null)return;var gx=d.l+(at[0]-d.x0)/(d.x1-d.x0)*(d.w-d.l-d.r);
guide.setAttribute('x1',gx);guide.setAttribute('x2',gx);guide.style.display='';
showTip(d.xl+': '+fx(at[1])+'\n'+lines.join('\n'),ev)});
svg.addEventListener('mouseleave',function(){guide.style.display='none';hideTip()})});

var NAMES=['allocated bytes','allocated objects','in-use bytes','in-use objects'];
function hue(s){var h=0;for(var i=0;i<s.length;i++)h=(h*31+s.charCodeAt(i))|0;return h}
function Flame(fig){
var root=JSON.parse(fig.querySelector('.fg-data').textContent);
var chart=fig.querySelector('.fg-chart'),sel=fig.querySelector('.fg-value'),search=fig.querySelector('.fg-search');
var status=fig.querySelector('.fg-status'),focus=root,query='',vi=+sel.value,ROW=18;
(function link(n,p){n.p=p;(n.c||[]).forEach(function(k){link(k,n)})})(root,null);
function v(n){return n.v[vi]}
function fmt(i,x){return i%2?count(x)+(i===1?' calls':' objects'):bytes(x)}
function matches(n){return query!==''&&n.n.toLowerCase().indexOf(query)>=0}
function box(n,x,w,d,cls){var e=document.createElement('div');e.className='fg-node'+cls+(matches(n)?' match':'');
var h=hue(n.n);e.style.background='hsl('+(190+Math.abs(h)%50)+','+(45+Math.abs(h>>8)%25)+'%,'+(62+Math.abs(h>>16)%18)+'%)';
e.style.left=x+'%';e.style.width=w+'%';e.style.top=d*ROW+'px';e.textContent=n.n;e.fgNode=n;chart.appendChild(e)}
function draw(){chart.textContent='';var path=[];for(var a=focus;a;a=a.p)path.unshift(a);
var total=v(focus),depth=0;
if(!(total>0)){chart.style.height=ROW+'px';status.textContent='no '+NAMES[vi]+' in '+(focus===root?'this profile':focus.n);return}
path.forEach(function(a,i){if(i<path.length-1)box(a,0,100,i,' anc')});
(function lay(n,x,d){var w=v(n)/total*100;if(w<0.1)return;box(n,x,w,d,'');if(d>depth)depth=d;
var kids=(n.c||[]).slice().sort(function(a,b){return v(b)-v(a)}),cx=x;
kids.forEach(function(k){lay(k,cx,d+1);cx+=v(k)/total*100})})(focus,0,path.length-1);
chart.style.height=(depth+1)*ROW+'px';
var msg=NAMES[vi]+': '+fmt(vi,v(root))+' in all';if(focus!==root)msg+='; zoomed into '+focus.n+' ('+fmt(vi,total)+')';
if(query!==''){var m=0,sum=0;(function walk(n,inside){var hit=matches(n);if(hit)m++;if(hit&&!inside)sum+=v(n);(n.c||[]).forEach(function(k){walk(k,inside||hit)})})(root,false);
msg+='; search: '+m+' frame'+(m===1?'':'s')+' match, '+fmt(vi,sum)+' ('+(v(root)>0?(sum/v(root)*100).toFixed(1):'0')+' % of all)'}
status.textContent=msg}
chart.addEventListener('click',function(ev){var n=ev.target.fgNode;if(n){focus=n;draw()}});
chart.addEventListener('mousemove',function(ev){var n=ev.target.fgNode;if(!n){hideTip();return}
var lines=[n.n];for(var i=0;i<4;i++){var s=fmt(i,n.v[i]);if(root.v[i]>0)s+=' ('+(n.v[i]/root.v[i]*100).toFixed(1)+' %)';lines.push(NAMES[i]+': '+s)}
showTip(lines.join('\n'),ev)});
chart.addEventListener('mouseleave',hideTip);
sel.addEventListener('change',function(){vi=+sel.value;draw()});
search.addEventListener('input',function(){query=search.value.trim().toLowerCase();draw()});
fig.querySelector('.fg-reset').addEventListener('click',function(){focus=root;draw()});
draw()}
document.querySelectorAll('figure.flame').forEach(Flame);
document.body.setAttribute('data-ready','1');
})();"#;

impl Exporter for HtmlExporter {
    fn render(&self, doc: &Document) -> Result<Vec<Output>, ExportError> {
        Ok(vec![Output { file: Some(self.file.clone()), bytes: page(&self.title, &doc.views, &self.extras)?.into_bytes() }])
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
        let flame = FlameGraph {
            title: "flame </script>".into(),
            section: Some("process 7".into()),
            root: crate::export::flame::FlameNode { name: "all".into(), values: [10.0, 1.0, 0.0, 0.0], children: vec![] },
            left_out: 3,
            first_value: 0,
            estimated: false,
        };
        let summary = Summary { items: vec![("peak live".into(), "2.0 KiB".into())], warnings: vec!["damaged <chunk>".into()] };
        let mut views = views;
        views.push(View::Note("══ second ══".into()));
        views.push(View::Note("after".into()));
        let html = page("report of x<y", &views, &Extras { summary: Some(summary), flames: vec![flame], images: Vec::new() }).unwrap();
        assert!(html.starts_with("<!DOCTYPE html>"));
        assert!(html.contains("<title>report of x&lt;y</title>"));
        assert!(html.contains("<h2 id=\"s1\">process 7 — prog</h2>"), "{html}");
        assert!(html.contains("<li><a href=\"#s1\">process 7 — prog</a></li>"), "the contents link to each section");
        assert!(html.contains("a &lt;note&gt;"));
        assert!(html.contains("<h3>sizes &lt;b&gt;</h3>"));
        assert!(html.contains("<td>a&amp;b</td><td class=\"num\" data-v=\"2048\">2.0 KiB</td>"), "{html}");
        assert!(!html.contains("raw rows"), "data-only tables stay out");
        assert!(html.contains("<figure class=\"plot line\" id=\"plot-mem\">"));
        let (summary_at, contents_at, flame_at, second_at) = (html.find("id=\"summary\"").unwrap(), html.find("id=\"contents\"").unwrap(), html.find("<figure class=\"flame\"").unwrap(), html.find("id=\"s2\"").unwrap());
        assert!(summary_at < contents_at && contents_at < html.find("id=\"s1\"").unwrap(), "summary, then contents, then the sections");
        assert!(flame_at < second_at, "the flame graph ends its own section");
        assert!(html.contains("warning: damaged &lt;chunk&gt;"));
        assert!(html.contains("3 smaller frames left out"));
        assert!(html.contains("\"n\":\"all\",\"v\":[10.0,1.0,0.0,0.0]"), "{html}");
        assert!(!html.contains("flame </script>") && html.contains("flame &lt;/script&gt;"));
        for external in ["src=\"http", "href=\"http", "<link", "url(http", "src=\"/", "@import"] {
            assert!(!html.contains(external), "no external resource ({external})");
        }
    }
}
