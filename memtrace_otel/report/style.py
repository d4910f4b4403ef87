"""The report page's inline stylesheet and script (no CDN: the file must work offline).

The script draws each lineage picture when its section nears the viewport
(``IntersectionObserver``; all at once where that is missing): it reads the
picture's compact record and the page's string table
(:mod:`~memtrace_otel.report.figdata`) and builds the SVG with
``createElementNS`` and ``textContent``, so no string from the input is parsed
as markup. ``window.memtraceDrawAll()`` draws every picture (for printing and
for tests). Failure sections are laid out only when near the window
(``content-visibility: auto``), so a long page opens at the cost of its text.
"""

from __future__ import annotations

import json

from memtrace_otel.report.figdata import KINDS
from memtrace_otel.report.layout import NODE_HEIGHT, NODE_WIDTH
from memtrace_otel.report.slice import MARKS

__all__ = ["PAGE_CSS", "PAGE_SCRIPT"]

PAGE_CSS = """
:root{--fg:#1d2330;--muted:#6b7280;--line:#d7dbe3;--bg:#fff;--band:#f3f5f9;--band2:#eaf0f8;
--op:#e8eefc;--opline:#5b7bd5;--var:#fff;--varline:#98a2b3;--red:#d92d20;--orange:#f79009;
--green:#12b76a;--blue:#2e90fa}
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--fg);background:var(--bg);
margin:0;padding:24px 32px}
h1{font-size:24px;margin:0 0 8px}
h2{font-size:17px;margin:0 0 6px}
h3{font-size:14px;margin:10px 0 4px}
code{font:12px ui-monospace,SFMono-Regular,Menlo,monospace;background:#f2f4f7;padding:1px 4px;
border-radius:3px}
.none{color:var(--muted);font-style:italic}
.charts{display:flex;flex-wrap:wrap;gap:24px}
figure{margin:0}
figure.chart{border:1px solid var(--line);border-radius:8px;padding:12px 16px}
figcaption{font-weight:600;margin-bottom:6px}
.bar rect{fill:var(--opline)}
.bar-label,.bar-count{font-size:12px;fill:var(--fg)}
.legend{color:var(--muted)}
.key{display:inline-block;padding:0 8px;border-radius:10px;border:2px solid var(--varline);margin-right:4px;
color:var(--fg);font-size:12px}
.key.root-cause{border-color:var(--red);background:#fee4e2}
.key.lost{border-color:var(--orange);border-style:dashed}
.key.deleted{border-color:#475467;background:#d0d5dd;text-decoration:line-through}
.key.overwritten{border-style:dotted}
.key.evidence{border-color:var(--green)}
.key.answer{border-color:var(--blue)}
.key.collapsed{background:#f9fafb;border-style:dashed}
section.failure{border-top:1px solid var(--line);padding:18px 0}
/* off-screen sections are not laid out: a page of thousands opens at the cost of its text */
section.failure{content-visibility:auto;contain-intrinsic-size:auto 760px}
.num{color:var(--muted);font-weight:400}
.group{color:var(--muted);margin:0}
.verdict{margin:4px 0 8px}
.error-type{background:#fee4e2;color:#b42318;padding:1px 8px;border-radius:10px;font-weight:600}
.unattributed{color:#b42318}
.conf,.engine{color:var(--muted)}
table.case{border-collapse:collapse;max-width:1100px}
table.case th{text-align:left;vertical-align:top;padding:2px 12px 2px 0;color:var(--muted);font-weight:500;
white-space:nowrap}
table.case td{padding:2px 0;white-space:pre-wrap;word-break:break-word}
tr.prediction td{color:#b42318}
tr.gold td{color:#067647}
.missing{color:#b54708}
.lost ul,.candidates ol{margin:0;padding-left:20px}
.lineage-figure{margin-top:10px}
.figure{overflow:auto;max-height:640px;border:1px solid var(--line);border-radius:8px;background:#fcfcfd}
.placeholder{color:var(--muted);padding:8px;margin:0}
svg.lineage{display:block;font-size:12px}
.band rect{fill:var(--band);stroke:none}
.band:nth-of-type(even) rect{fill:var(--band2)}
.band-label{fill:var(--muted);font-size:11px}
.edge{fill:none;stroke:#98a2b3;stroke-width:1.2}
.edge.back{stroke-dasharray:4 3}
#mt-arrow path{fill:#98a2b3}
.node rect{width:172px;height:42px;rx:14px;fill:var(--var);stroke:var(--varline);stroke-width:1.2}
.node.operation rect{rx:4px;fill:var(--op);stroke:var(--opline)}
.node.collapsed rect{fill:#f9fafb;stroke-dasharray:4 3}
.node text{fill:var(--fg)}
.node text.sub{fill:var(--muted);font-size:11px}
.node.path rect{stroke-width:2}
.node.evidence rect{stroke:var(--green);stroke-width:2.5}
.node.answer rect{stroke:var(--blue);stroke-width:2.5}
.node.overwritten rect{stroke-dasharray:2 2}
.node.deleted rect{fill:#d0d5dd;stroke:#475467}
.node.deleted text{text-decoration:line-through}
.node.lost rect{stroke:var(--orange);stroke-width:3;stroke-dasharray:6 3}
.node.root-cause rect{fill:#fee4e2;stroke:var(--red);stroke-width:3.5}
.badge{font-size:11px;font-weight:700;fill:var(--red)}
.node.lost .badge{fill:var(--orange)}
a .node:hover rect{filter:brightness(.95)}
@media print{.figure{max-height:none;overflow:visible}}
"""

# The record's codes and the node size, from the Python side: one source of truth.
_CONSTANTS = (f"var NS = 'http://www.w3.org/2000/svg', W = {NODE_WIDTH}, H = {NODE_HEIGHT};\n"
              f"var KINDS = {json.dumps(KINDS)}, MARKS = {json.dumps(MARKS)};\n")

PAGE_SCRIPT = "\n(function(){\n" + _CONSTANTS + r"""
  var ROOT = 1 << MARKS.indexOf('root_cause'), LOST = 1 << MARKS.indexOf('lost');
  var boxes = Array.prototype.slice.call(document.querySelectorAll('.figure[data-fig]')), strings = null;
  function str(i){
    if (strings === null) {
      var table = document.getElementById('mt-strings');
      strings = table ? JSON.parse(table.textContent) : [];
    }
    return i < 0 ? null : strings[i];
  }
  function short(text, limit){
    if (text.length <= limit) return text;
    var chars = Array.from(text);  /* code points, as the Python side counts */
    return chars.length <= limit ? text : chars.slice(0, limit - 1).join('') + '\u2026';
  }
  function el(name, attrs, parent){
    var node = document.createElementNS(NS, name);
    for (var key in attrs) node.setAttribute(key, attrs[key]);
    if (parent) parent.appendChild(node);
    return node;
  }
  function text(name, attrs, value, parent){ el(name, attrs, parent).textContent = value; }
  function linked(url, parent){
    return url === null ? parent : el('a', {href: url, target: '_blank', rel: 'noopener'}, parent);
  }
  function band(b, height, svg){
    var trace = str(b[0]), g = el('g', {'class': 'band', 'data-trace': trace || ''}, svg);
    text('title', {}, trace || 'no trace', g);
    el('rect', {x: b[1], y: 2, width: Math.max(b[2] - b[1], 1), height: height - 4, rx: 6}, g);
    var label = trace ? 'trace ' + short(trace, 16) : 'no trace';
    text('text', {'class': 'band-label', x: b[1] + 6, y: 16}, label, linked(str(b[3]), g));
  }
  function edge(u, v, svg){
    var x1 = u[0] + W, y1 = u[1] + H / 2, x2 = v[0], y2 = v[1] + H / 2;
    var bend = Math.round(Math.max(30, Math.abs(x2 - x1) / 2));
    el('path', {'class': x2 <= x1 ? 'edge back' : 'edge', 'marker-end': 'url(#mt-arrow)',
                d: 'M' + x1 + ',' + y1 + ' C' + (x1 + bend) + ',' + y1 + ' ' + (x2 - bend) + ',' + y2 + ' '
                   + x2 + ',' + y2}, svg);
  }
  function tooltip(n, kind, marks){
    var id = str(n[3]), span = str(n[7]), content = str(n[8]);
    var lines = [kind === 'collapsed' ? str(n[4]) : id, str(n[5])];
    if (span) lines.push('trace ' + str(n[6]) + ' span ' + span);
    if (content !== null) lines.push('content: ' + content);
    var shown = marks.filter(function(m){ return m !== 'path'; });
    var words = shown.map(function(m){ return m.replace(/_/g, ' '); });
    if (words.length) lines.push('marked: ' + words.join(', '));
    return lines.filter(Boolean).join('\n');
  }
  function node(n, svg){
    var kind = KINDS[n[2]], marks = MARKS.filter(function(m, bit){ return n[9] & (1 << bit); }).sort();
    var classes = ['node', kind].concat(marks.map(function(m){ return m.replace(/_/g, '-'); }));
    var g = el('g', {'class': classes.join(' '), 'data-node': str(n[3])}, linked(str(n[10]), svg));
    text('title', {}, tooltip(n, kind, marks), g);
    el('rect', {x: n[0], y: n[1]}, g);  /* size and corners come from the CSS */
    text('text', {x: n[0] + 8, y: n[1] + 17}, short(str(n[4]), 24), g);
    text('text', {'class': 'sub', x: n[0] + 8, y: n[1] + 33}, short(str(n[5]) || '', 30), g);
    var badge = n[9] & ROOT ? 'root cause' : n[9] & LOST ? 'lost' : '';
    if (badge) text('text', {'class': 'badge', x: n[0] + W - 6, y: n[1] - 4, 'text-anchor': 'end'}, badge, g);
  }
  function draw(box){
    if (box.getAttribute('data-drawn')) return;
    box.setAttribute('data-drawn', '1');
    var source = document.getElementById('fig-' + box.getAttribute('data-fig'));
    if (!source) return;
    var f = JSON.parse(source.textContent), w = f[0], h = f[1], nodes = f[3], edges = f[4];
    var svg = el('svg', {'class': 'lineage', width: w, height: h, viewBox: '0 0 ' + w + ' ' + h, role: 'img',
                         'aria-label': 'lineage of the failed answer'});
    f[2].forEach(function(b){ band(b, h, svg); });
    for (var i = 0; i < edges.length; i += 2) edge(nodes[edges[i]], nodes[edges[i + 1]], svg);
    nodes.forEach(function(n){ node(n, svg); });
    box.textContent = '';
    box.appendChild(svg);
  }
  window.memtraceDrawAll = function(){ boxes.forEach(draw); };
  if (!('IntersectionObserver' in window)) { boxes.forEach(draw); return; }
  /* Each box is watched through its section: a box inside an off-screen section (content-visibility:
     auto) has no layout of its own, and Chromium lays the section out to test it, for every box at every
     check (3,408 failures: no load event in 120 s; their sections watched instead: 2.1 s). */
  function boxOf(watched){
    return watched.matches('.figure[data-fig]') ? watched : watched.querySelector('.figure[data-fig]');
  }
  var watch = new IntersectionObserver(function(entries){
    entries.forEach(function(entry){
      if (entry.isIntersecting) { draw(boxOf(entry.target)); watch.unobserve(entry.target); }
    });
  }, {rootMargin: '1200px 0px'});
  boxes.forEach(function(box){ watch.observe(box.closest('section.failure') || box); });
  window.addEventListener('beforeprint', window.memtraceDrawAll);
})();
"""
