/* rooflinekit HTML report: draws the roofline and the tables from the JSON payload in #rk-data.
   Self-contained: no library, no network. Exposes window.rooflinekit for tests and the console. */
(function () {
  'use strict';

  var SVGNS = 'http://www.w3.org/2000/svg';
  var data = JSON.parse(document.getElementById('rk-data').textContent);

  // -- one number formatter: SI prefixes, no scientific notation, "<0.01%" for tiny shares --------

  var PREFIXES = [[1e18, 'E'], [1e15, 'P'], [1e12, 'T'], [1e9, 'G'], [1e6, 'M'], [1e3, 'k']];

  function missing(v) {
    return v === null || v === undefined || (typeof v === 'number' && !isFinite(v));
  }

  function plain(v, digits) {
    // digits significant figures, never an exponent
    if (v === 0) return '0';
    var a = Math.abs(v);
    if (a < 1e-6) return (v < 0 ? '>-' : '<') + '0.000001';
    if (a >= 1e21) return Math.round(v).toLocaleString('en-US');
    return String(Number(v.toPrecision(digits || 3)));
  }

  function si(v, unit) {
    unit = unit || '';
    if (missing(v)) return '\u2013';
    if (v === 0) return ('0 ' + unit).trim();
    var a = Math.abs(v);
    for (var i = 0; i < PREFIXES.length; i++) {
      var scale = PREFIXES[i][0];
      if (a >= scale * 0.9995) {
        var x = Number((v / scale).toPrecision(3));
        if (Math.abs(x) >= 1000 && i > 0) { scale = PREFIXES[i - 1][0]; x = Number((v / scale).toPrecision(3)); return plain(x) + ' ' + PREFIXES[i - 1][1] + unit; }
        if (Math.abs(x) >= 1000) return Math.round(v / scale).toLocaleString('en-US') + ' ' + PREFIXES[i][1] + unit;
        return plain(x) + ' ' + PREFIXES[i][1] + unit;
      }
    }
    return (plain(v) + ' ' + unit).trim();
  }

  function num(v, unit) {
    if (missing(v)) return '\u2013';
    var text = Math.abs(v) >= 1e4 ? si(v, '') : plain(v);
    if (!unit) return text;
    return unit === 'x' ? text + '\u00d7' : text + ' ' + unit;
  }

  function pct(v) {
    if (missing(v)) return '\u2013';
    if (v === 0) return '0%';
    var p = 100 * v;
    var a = Math.abs(p);
    if (a < 0.005) return (p < 0 ? '>-' : '<') + '0.01%';
    return (a >= 10 ? p.toFixed(1) : p.toFixed(2)) + '%';
  }

  function time(v) {
    if (missing(v)) return '\u2013';
    if (v === 0) return '0 s';
    var a = Math.abs(v);
    var steps = [[1, 's'], [1e-3, 'ms'], [1e-6, '\u00b5s'], [1e-9, 'ns']];
    for (var i = 0; i < steps.length; i++) {
      if (a >= steps[i][0] * 0.9995 || i === steps.length - 1) {
        var x = Number((v / steps[i][0]).toPrecision(3));
        if (Math.abs(x) >= 1000 && i > 0) return plain(v / steps[i - 1][0]) + ' ' + steps[i - 1][1];
        return (Math.abs(x) >= 1000 ? Math.round(x).toLocaleString('en-US') : plain(x)) + ' ' + steps[i][1];
      }
    }
    return plain(v) + ' s';
  }

  function int(v) {
    return missing(v) ? '\u2013' : Number(v).toLocaleString('en-US');
  }

  function value(v, kind, unit) {
    if (kind === 'auto' && Array.isArray(v)) return value(v[0], v[1], v[2]);
    if (missing(v)) return '\u2013';
    if (typeof v === 'string') return v;
    if (typeof v === 'boolean') return v ? 'yes' : 'no';
    switch (kind) {
      case 'si': return si(v, unit);
      case 'num': return num(v, unit);
      case 'pct': return pct(v);
      case 'time': return time(v);
      case 'int': return int(v);
      case 'bool': return v ? 'yes' : 'no';
      default: return typeof v === 'number' ? num(v, unit) : String(v);
    }
  }

  function tick(v) {
    // axis labels: decades as 0.001 .. 100, 1k, 10k ...
    if (v >= 1000) return si(v, '');
    return plain(v);
  }

  var fmt = { si: si, num: num, pct: pct, time: time, int: int, value: value, tick: tick };

  // -- DOM helpers --------------------------------------------------------------------------------

  function el(tag, attrs, text) {
    var node = document.createElement(tag);
    for (var k in attrs || {}) {
      if (attrs[k] !== null && attrs[k] !== undefined) node.setAttribute(k, attrs[k]);
    }
    if (text !== undefined && text !== null) node.textContent = text;
    return node;
  }

  function sv(tag, attrs, text) {
    var node = document.createElementNS(SVGNS, tag);
    for (var k in attrs || {}) {
      if (attrs[k] !== null && attrs[k] !== undefined) node.setAttribute(k, attrs[k]);
    }
    if (text !== undefined && text !== null) node.textContent = text;
    return node;
  }

  function put(parent, child) {
    parent.appendChild(child);
    return child;
  }

  function add(parent) {
    for (var i = 1; i < arguments.length; i++) if (arguments[i]) parent.appendChild(arguments[i]);
    return parent;
  }

  /* Text with line-break opportunities after '/', '_' and '.' (paths, module names), no characters added. */
  function breakable(node, text) {
    text.replace(/([\/_.])/g, '$1\n').split('\n').forEach(function (part, i) {
      if (i) node.appendChild(document.createElement('wbr'));
      node.appendChild(document.createTextNode(part));
    });
    return node;
  }

  // -- the header: title, key figures, cards, warnings and notes -----------------------------------

  function renderHeader(app) {
    var head = add(el('header', { 'class': 'rk-head' }),
      el('div', { 'class': 'rk-kicker' }, 'rooflinekit ' + data.kind + ' report'),
      el('h1', null, data.title));
    var tiles = el('div', { 'class': 'rk-tiles' });
    (data.header.tiles || []).forEach(function (t) {
      var bad = t[1] === 'no' || t[1] === false;
      add(tiles, add(el('div', { 'class': 'rk-tile' + (bad ? ' rk-bad' : '') }),
        el('div', { 'class': 'rk-tile-value' }, value(t[1], t[2], t[3])), el('div', { 'class': 'rk-tile-label' }, t[0])));
    });
    add(head, tiles);
    if (data.warnings && data.warnings.length) {
      var warn = add(el('section', { 'class': 'rk-warnings', 'id': 'rk-warnings' }),
        el('h2', null, 'Warnings (' + data.warnings.length + ')'));
      var wl = el('ul');
      data.warnings.forEach(function (w) { add(wl, el('li', null, w)); });
      add(head, add(warn, wl));
    }
    var cards = el('div', { 'class': 'rk-cards' });
    (data.header.cards || []).forEach(function (c) {
      var dl = el('dl');
      c.items.forEach(function (it) {
        if (missing(it[1]) || it[1] === '') return;
        var long = typeof it[1] === 'string' && it[1].length > 20;
        var dd = el('dd', { title: long ? it[1] : null, 'class': long ? 'rk-text' : null });
        if (long) breakable(dd, it[1]);
        else dd.textContent = value(it[1], it[2], it[3]);
        add(dl, el('dt', null, it[0]), dd);
      });
      add(cards, add(el('section', { 'class': 'rk-card' }), el('h2', null, c.title), dl));
    });
    add(head, cards);
    if (data.notes && data.notes.length) {
      // the assumptions behind the numbers: open when short, one click away when long
      var notes = add(el('details', { 'class': 'rk-notes', id: 'rk-notes', open: data.notes.length <= 3 ? '' : null }),
        el('summary', null, 'Notes: assumptions and how the figures were made (' + data.notes.length + ')'));
      var nl = el('ul');
      data.notes.forEach(function (n) { add(nl, el('li', null, n)); });
      add(head, add(notes, nl));
    }
    if (data.conventions && data.conventions.length) {
      var conv = add(el('details', { 'class': 'rk-notes' }), el('summary', null, 'Conventions: what each figure means'));
      var cl = el('dl', { 'class': 'rk-conventions' });
      data.conventions.forEach(function (c) { add(cl, el('dt', null, c[0]), el('dd', null, c[1])); });
      add(head, add(conv, cl));
    }
    add(app, head);
  }

  // -- the roofline chart ---------------------------------------------------------------------------

  var W = 960, H = 540, M = { l: 70, r: 20, t: 14, b: 50 };
  var RMAX = 40, RMIN = 3, RFIX = 5.5;

  function shapePath(shape, x, y, r) {
    switch (shape) {
      case 'square': {
        var s = r * 0.886;
        return 'M' + (x - s) + ' ' + (y - s) + 'h' + 2 * s + 'v' + 2 * s + 'h' + -2 * s + 'z';
      }
      case 'diamond': {
        var d = r * 1.25;
        return 'M' + x + ' ' + (y - d) + 'L' + (x + d) + ' ' + y + 'L' + x + ' ' + (y + d) + 'L' + (x - d) + ' ' + y + 'z';
      }
      case 'triangle': {
        var t = r * 1.2;
        return 'M' + x + ' ' + (y - t) + 'L' + (x + t) + ' ' + (y + t * 0.8) + 'L' + (x - t) + ' ' + (y + t * 0.8) + 'z';
      }
      default:
        return 'M' + (x - r) + ' ' + y + 'a' + r + ' ' + r + ' 0 1 0 ' + 2 * r + ' 0a' + r + ' ' + r + ' 0 1 0 ' + -2 * r + ' 0';
    }
  }

  function log10(v) { return Math.log(v) / Math.LN10; }

  function overlaps(a, b) {
    return a.x < b.x + b.w && b.x < a.x + a.w && a.y < b.y + b.h && b.y < a.y + a.h;
  }

  /* A common name for a group of rows: model.layers.3.mlp .. model.layers.60.mlp -> model.layers.*.mlp */
  function groupName(names) {
    if (names.length === 1) return names[0];
    var parts = names.map(function (n) { return n.split('.'); });
    var len = parts[0].length;
    if (!parts.every(function (p) { return p.length === len; })) return names[0] + ' \u2026';
    var out = [];
    for (var i = 0; i < len; i++) {
      var same = parts.every(function (p) { return p[i] === parts[0][i]; });
      var nums = parts.map(function (p) { return /^[0-9]+$/.test(p[i]) ? Number(p[i]) : NaN; });
      var lo = Math.min.apply(null, nums), hi = Math.max.apply(null, nums);
      var run = nums.every(function (n) { return !isNaN(n); }) && hi - lo + 1 === names.length;
      out.push(same ? parts[0][i] : (run ? lo + '\u2013' + hi : '*'));  // layers 3-60, or * where not a run
    }
    return out.join('.');
  }

  function Chart(spec, host) {
    var self = this;
    this.spec = spec;
    this.selection = data.selector ? { b: data.selector.batch, c: data.selector.context } : null;
    this.hidden = {};
    var wrap = put(host, el('div', { 'class': 'rk-chart-wrap' }));
    this.legend = put(wrap, el('div', { 'class': 'rk-legend', id: 'rk-legend' }));
    var box = put(wrap, el('div', { 'class': 'rk-chart', id: 'rk-chart' }));
    this.svg = put(box, sv('svg', { viewBox: '0 0 ' + W + ' ' + H, role: 'img', 'aria-label': 'roofline chart',
      preserveAspectRatio: 'xMidYMid meet' }));
    this.tip = put(box, el('div', { 'class': 'rk-tip', id: 'rk-tip', hidden: '' }));
    this.omitted = put(wrap, el('p', { 'class': 'rk-omitted', id: 'rk-omitted' }));
    this.domain();
    this.drawFrame();
    this.layer = put(this.svg, sv('g', { 'class': 'rk-points', 'clip-path': 'url(#rk-clip)' }));
    this.labels = put(this.svg, sv('g', { 'class': 'rk-labels' }));
    this.svg.addEventListener('mouseleave', function () { self.hideTip(); });
    this.draw();
  }

  Chart.prototype.domain = function () {
    var xs = [], ys = [], self = this;
    this.all = [];  // every point of every selection, where it is drawn: [FLOP/B, FLOP/s, radius]
    this.spec.series.forEach(function (s) {
      s.points.forEach(function (p) {
        xs.push(p.x); ys.push(p.y);
        if (p.a) ys.push(p.a);
        self.all.push([p.x, p.a ? p.a : p.y, self.radius(s, p)]);
      });
    });
    var ridges = this.spec.roofs.map(function (r) { return r.peak / r.bandwidth; });
    var peaks = this.spec.roofs.map(function (r) { return r.peak; });
    var xlo = Math.min.apply(null, xs.concat(ridges)), xhi = Math.max.apply(null, xs.concat(ridges));
    var ylo = Math.min.apply(null, ys.concat(peaks)), yhi = Math.max.apply(null, ys.concat(peaks));
    // log10 bounds with a margin around every point, ridge and peak; at least two decades each way
    this.lx = [log10(xlo) - 0.35, log10(Math.max(xhi * 2.2, Math.max.apply(null, ridges) * 3.5))];
    this.ly = [log10(ylo / 1e12) - 0.35, log10(yhi / 1e12) + 0.3];
    if (this.lx[1] - this.lx[0] < 2) this.lx[0] = this.lx[1] - 2;
    if (this.ly[1] - this.ly[0] < 2) this.ly[0] = this.ly[1] - 2;
  };

  Chart.prototype.X = function (v) {
    return M.l + (log10(v) - this.lx[0]) / (this.lx[1] - this.lx[0]) * (W - M.l - M.r);
  };

  Chart.prototype.Y = function (flops) {
    return H - M.b - (log10(flops / 1e12) - this.ly[0]) / (this.ly[1] - this.ly[0]) * (H - M.t - M.b);
  };

  Chart.prototype.drawFrame = function () {
    var svg = this.svg, self = this;
    var x0 = M.l, x1 = W - M.r, y0 = M.t, y1 = H - M.b;
    var defs = put(svg, sv('defs'));
    add(put(defs, sv('clipPath', { id: 'rk-clip' })), sv('rect', { x: x0, y: y0, width: x1 - x0, height: y1 - y0 }));
    add(svg, sv('rect', { x: x0, y: y0, width: x1 - x0, height: y1 - y0, 'class': 'rk-plot-bg' }));
    var grid = put(svg, sv('g', { 'class': 'rk-grid' }));
    var axes = put(svg, sv('g', { 'class': 'rk-axes' }));
    var ex = [Math.ceil(this.lx[0]), Math.floor(this.lx[1])], ey = [Math.ceil(this.ly[0]), Math.floor(this.ly[1])];
    var xstep = ex[1] - ex[0] > 9 ? 2 : 1, ystep = ey[1] - ey[0] > 7 ? 2 : 1;
    var e, m, v;
    for (e = Math.floor(this.lx[0]); e <= ex[1]; e++) {
      for (m = 1; m < 10; m++) {
        v = m * Math.pow(10, e);
        if (log10(v) < this.lx[0] || log10(v) > this.lx[1]) continue;
        var x = this.X(v);
        if (m === 1) {
          add(grid, sv('line', { x1: x, x2: x, y1: y0, y2: y1 }));
          if ((e - ex[0]) % xstep === 0) add(axes, sv('text', { x: x, y: y1 + 17, 'text-anchor': 'middle' }, tick(v)));
        } else {
          add(grid, sv('line', { x1: x, x2: x, y1: y1, y2: y1 - 4, 'class': 'rk-minor' }));
        }
      }
    }
    for (e = Math.floor(this.ly[0]); e <= ey[1]; e++) {
      for (m = 1; m < 10; m++) {
        v = m * Math.pow(10, e);
        if (log10(v) < this.ly[0] || log10(v) > this.ly[1]) continue;
        var y = this.Y(v * 1e12);
        if (m === 1) {
          add(grid, sv('line', { x1: x0, x2: x1, y1: y, y2: y }));
          if ((e - ey[0]) % ystep === 0) add(axes, sv('text', { x: x0 - 7, y: y + 4, 'text-anchor': 'end' }, tick(v)));
        } else {
          add(grid, sv('line', { x1: x0, x2: x0 + 4, y1: y, y2: y, 'class': 'rk-minor' }));
        }
      }
    }
    add(axes, sv('rect', { x: x0, y: y0, width: x1 - x0, height: y1 - y0, 'class': 'rk-frame' }));
    add(axes, sv('text', { x: (x0 + x1) / 2, y: H - 10, 'text-anchor': 'middle', 'class': 'rk-axis-title' },
      'arithmetic intensity (FLOP/B)'));
    add(axes, sv('text', { x: -(y0 + y1) / 2, y: 16, transform: 'rotate(-90)', 'text-anchor': 'middle',
      'class': 'rk-axis-title' }, this.spec.y_label || 'TFLOP/s'));
    // roofs: the memory slope up to the ridge, then the compute roof
    var roofs = put(svg, sv('g', { 'class': 'rk-roofs', 'clip-path': 'url(#rk-clip)' }));
    this.fixedBoxes = [];
    var roofLabels = put(svg, sv('g', { 'class': 'rk-roof-labels' }));
    var xmin = Math.pow(10, this.lx[0]), xmax = Math.pow(10, this.lx[1]), ymin = Math.pow(10, this.ly[0]) * 1e12;
    var slopesDone = {};
    this.spec.roofs.forEach(function (r, i) {
      var ridge = r.peak / r.bandwidth;
      var xs = Math.max(xmin, ymin / r.bandwidth);
      var d = 'M' + self.X(xs) + ' ' + self.Y(r.bandwidth * xs) + 'L' + self.X(ridge) + ' ' + self.Y(r.peak) +
        'L' + self.X(xmax) + ' ' + self.Y(r.peak);
      add(roofs, sv('path', { d: d, 'class': 'rk-roof' + (r.dashed ? ' rk-dashed' : ''), stroke: r.colour,
        'data-roof': r.label }));
      if (!r.dashed) {
        add(roofs, sv('line', { x1: self.X(ridge), x2: self.X(ridge), y1: self.Y(r.peak), y2: y1,
          'class': 'rk-ridge', stroke: r.colour }));
      }
      var label = r.label + ': ' + si(r.peak, 'FLOP/s');
      self.placeFixed(roofLabels, label, [[x1 - 6, self.Y(r.peak) - 6, 'end'], [x1 - 6, self.Y(r.peak) + 15, 'end'],
        [self.X(ridge) + 6, self.Y(r.peak) - 6, 'start'], [self.X(ridge) + 6, self.Y(r.peak) + 15, 'start']], r.colour);
      if (!r.dashed) {
        self.placeFixed(roofLabels, 'ridge ' + num(ridge, 'FLOP/B'),
          [[self.X(ridge) + 5, y1 - 7, 'start'], [self.X(ridge) - 5, y1 - 7, 'end'], [self.X(ridge) + 5, y1 - 24, 'start']], r.colour);
      }
      if (!slopesDone[r.bandwidth]) {
        slopesDone[r.bandwidth] = true;
        self.slopeLabel(roofLabels, r, xs, ridge);
      }
    });
  };

  /* The bandwidth's label along the memory slope, above or below it, where its box covers no point
     of any selection and no other roof label (else where it covers the fewest). */
  Chart.prototype.slopeLabel = function (g, r, xs, ridge) {
    var self = this;
    var x2 = Math.pow(10, log10(xs) + 1);
    var ang = Math.atan2(this.Y(r.bandwidth * x2) - this.Y(r.bandwidth * xs), this.X(x2) - this.X(xs));
    var cos = Math.cos(ang), sin = Math.sin(ang), deg = ang * 180 / Math.PI;
    var text = 'memory ' + si(r.bandwidth, 'B/s');
    var probe = put(g, sv('text', { x: 0, y: 0, 'class': 'rk-roof-label' }, text));
    var bb = probe.getBBox();
    g.removeChild(probe);
    var markers = this.all.map(function (q) {
      var h = q[2] * 1.25 + 2;  // a diamond reaches 1.25 r; and its stroke
      return { x: self.X(q[0]) - h, y: self.Y(q[1]) - h, w: 2 * h, h: 2 * h };
    });
    var best = null;
    [0.3, 0.55, 0.18, 0.42, 0.06, 0.65, 0.75, 0.85, 0.12, 0.24, 0.36, 0.48, 0.6, 0.7, 0.8, 0.9].some(function (frac) {
      var xa = Math.pow(10, log10(xs) + (log10(ridge) - log10(xs)) * frac);
      var px = self.X(xa), py = self.Y(r.bandwidth * xa);
      return [7, -(7 - bb.y)].some(function (gap) {  // baseline 7 px above the line, or its top 7 px below
        var lx = px + sin * gap, ly = py - cos * gap;
        var corners = [[bb.x, bb.y], [bb.x + bb.width, bb.y], [bb.x, bb.y + bb.height],
          [bb.x + bb.width, bb.y + bb.height]].map(function (c) {
          return [lx + c[0] * cos - c[1] * sin, ly + c[0] * sin + c[1] * cos];
        });
        var cx = corners.map(function (c) { return c[0]; }), cy = corners.map(function (c) { return c[1]; });
        var box = { x: Math.min.apply(null, cx) - 1, y: Math.min.apply(null, cy) - 1 };
        box.w = Math.max.apply(null, cx) + 1 - box.x;
        box.h = Math.max.apply(null, cy) + 1 - box.y;
        var inside = box.x >= M.l && box.x + box.w <= W - M.r && box.y >= M.t && box.y + box.h <= H - M.b;
        if (!inside || box.x + box.w > self.X(ridge) - 4) return false;
        var hits = markers.filter(function (m) { return overlaps(m, box); }).length +
          100 * self.fixedBoxes.filter(function (f) { return overlaps(f, box); }).length;
        if (best === null || hits < best.hits) best = { lx: lx, ly: ly, box: box, hits: hits };
        return hits === 0;
      });
    });
    if (!best) return;
    add(g, sv('text', { x: best.lx, y: best.ly, transform: 'rotate(' + deg + ' ' + best.lx + ' ' + best.ly + ')',
      'class': 'rk-roof-label rk-slope-label', fill: r.colour }, text));
    this.fixedBoxes.push(best.box);
  };

  /* A fixed label (roofs, ridge) at the first candidate position that overlaps no other. */
  Chart.prototype.placeFixed = function (g, text, candidates, colour) {
    for (var i = 0; i < candidates.length; i++) {
      var c = candidates[i];
      var t = put(g, sv('text', { x: c[0], y: c[1], 'text-anchor': c[2], 'class': 'rk-roof-label', fill: colour }, text));
      var bb = t.getBBox();
      var box = { x: bb.x - 2, y: bb.y - 1, w: bb.width + 4, h: bb.height + 2 };
      var inside = box.x >= M.l && box.x + box.w <= W - M.r && box.y >= M.t && box.y + box.h <= H - M.b;
      if (inside && !this.fixedBoxes.some(function (b) { return overlaps(b, box); })) {
        this.fixedBoxes.push(box);
        return t;
      }
      g.removeChild(t);
    }
    return null;
  };

  Chart.prototype.visible = function (s, p) {
    if (this.hidden[s.id]) return false;
    if (!s.select || !this.selection) return true;
    if (s.select === 'point') return p.b === this.selection.b && p.c === this.selection.c;
    if (s.select === 'context') return p.c === this.selection.c;
    return true;
  };

  Chart.prototype.radius = function (s, p) {
    if (s.sized && p.s !== undefined && p.s !== null) return Math.max(RMIN, Math.min(RMAX, Math.sqrt(p.s) * RMAX));
    if (s.shape === 'diamond') return 7;
    if (s.id === 'trail') return 3.5;
    return RFIX;
  };

  Chart.prototype.draw = function () {
    var self = this, layer = this.layer;
    while (layer.firstChild) layer.removeChild(layer.firstChild);
    while (this.labels.firstChild) this.labels.removeChild(this.labels.firstChild);
    this.drawn = [];
    var byName = {};
    var links = put(layer, sv('g', { 'class': 'rk-links' }));
    var all = [];
    this.spec.series.forEach(function (s, si_) {
      byName[s.id] = {};
      s.points.forEach(function (p, i) {
        if (!self.visible(s, p)) return;
        var y = p.a ? p.a : p.y;
        var item = { s: s, p: p, i: i, x: self.X(p.x), y: self.Y(y), ybound: self.Y(p.y), r: self.radius(s, p), order: si_ };
        all.push(item);
        byName[s.id][p.n] = item;
      });
    });
    // trail: a line through every batch at the selected context
    this.spec.series.forEach(function (s) {
      if (s.id !== 'trail' || self.hidden[s.id]) return;
      var pts = all.filter(function (d) { return d.s === s; }).sort(function (a, b) { return a.p.b - b.p.b; });
      if (pts.length > 1) {
        add(links, sv('polyline', { points: pts.map(function (d) { return d.x + ',' + d.y; }).join(' '),
          'class': 'rk-trail', stroke: s.colour }));
      }
    });
    // links: architecture minimum to executed, measured point to its bound, levers to the step
    all.forEach(function (d) {
      if (d.p.a) add(links, sv('line', { x1: d.x, x2: d.x, y1: d.y, y2: d.ybound, 'class': 'rk-link rk-achieved', stroke: d.s.colour }));
      if (!d.s.link || !byName[d.s.link]) return;
      var target = byName[d.s.link][d.p.n];
      if (!target) {
        var names = Object.keys(byName[d.s.link]);
        if (names.length === 1) target = byName[d.s.link][names[0]];
      }
      if (target) add(links, sv('line', { x1: target.x, y1: target.y, x2: d.x, y2: d.y, 'class': 'rk-link', stroke: d.s.colour }));
    });
    // big markers first, so that small ones stay on top and reachable; hollow (minimum) markers
    // under filled ones of the same size
    all.sort(function (a, b) { return b.r - a.r || (b.s.hollow ? 1 : 0) - (a.s.hollow ? 1 : 0) || a.order - b.order; });
    var groups = {};
    all.forEach(function (d) {
      var node = sv('path', { d: shapePath(d.s.shape, d.x, d.y, d.r), 'class': 'rk-point',
        'data-series': d.s.id, 'data-index': d.i, 'data-name': d.p.n,
        fill: d.s.hollow ? '#ffffff' : d.s.colour, 'fill-opacity': d.s.hollow ? 0.6 : (d.s.sized ? 0.55 : 0.9),
        stroke: d.s.colour, 'stroke-width': d.s.hollow ? 1.8 : 1.1 });
      node.addEventListener('mouseenter', function (ev) { self.showTip(d, ev); });
      node.addEventListener('mousemove', function (ev) { self.moveTip(ev); });
      node.addEventListener('mouseleave', function () { self.hideTip(); });
      d.node = node;
      add(layer, node);
      var key = d.s.id + '|' + Math.round(d.x) + '|' + Math.round(d.y);
      (groups[key] = groups[key] || []).push(d);
      d.group = groups[key];
      self.drawn.push(d);
    });
    this.labelPoints(groups);
    this.drawLegend();
    this.drawOmitted();
  };

  /* How far a drawn marker reaches from its centre: a diamond 1.25 r, a triangle 1.2 r, and half its stroke. */
  function reach(d) {
    return d.r * (d.s.shape === 'diamond' ? 1.25 : d.s.shape === 'triangle' ? 1.2 : 1) + (d.s.hollow ? 0.9 : 0.55);
  }

  Chart.prototype.labelPoints = function (groups) {
    var self = this;
    var obstacles = this.fixedBoxes.slice();
    this.drawn.forEach(function (d) {
      var h = reach(d);
      obstacles.push({ x: d.x - h, y: d.y - h, w: 2 * h, h: 2 * h, d: d });
    });
    var wanted = [];
    Object.keys(groups).forEach(function (k) {
      var g = groups[k], d = g[0];
      var tag = d.s.tag ? d.s.tag + ': ' : '';
      if (d.s.id === 'trail') wanted.push({ d: d, text: d.p.n, prio: 0 });
      else if (d.s.shape === 'diamond' && !d.s.hollow) wanted.push({ d: d, text: d.s.label, prio: 1 });
      else if (d.s.sized) {
        var share = g.reduce(function (a, x) { return a + (x.p.s || 0); }, 0);
        var names = g.map(function (x) { return x.p.n; }), common = groupName(names);
        // rows of different names at one spot: each named (up to three), not the first and a count
        var base = tag + (g.length > 1 && g.length <= 3 && / \u2026$/.test(common) ? names.join(', ')
          : common + (g.length > 1 ? ' (\u00d7' + g.length + ')' : ''));
        wanted.push({ d: d, base: base, text: base + (d.s.suffix ? ', ' + d.s.suffix : ''), prio: 2, share: share });
      }
    });
    // an attention layer whose minimum is what it executes: one label for both points
    wanted = wanted.filter(function (w) {
      if (w.d.s.suffix !== 'minimum') return true;
      var twin = wanted.find(function (v) {
        return v.d.s.suffix === 'executed' && v.base === w.base && Math.abs(v.d.x - w.d.x) < 2 && Math.abs(v.d.y - w.d.y) < 2;
      });
      if (twin) twin.text = twin.base + ', executed = minimum';
      return !twin;
    });
    wanted.sort(function (a, b) { return a.prio - b.prio || (b.share || 0) - (a.share || 0); });
    var sized = 0;
    wanted.forEach(function (w) {
      if (w.prio === 2 && sized >= 6) return;
      var d = w.d, r = 3 + self.drawn.reduce(function (a, o) {  // clear of every marker on this spot
        return Math.abs(o.x - d.x) < 2 && Math.abs(o.y - d.y) < 2 ? Math.max(a, reach(o)) : a;
      }, reach(d));
      var cands = [[r, -r + 2, 'start'], [r, r + 9, 'start'], [-r, -r + 2, 'end'], [-r, r + 9, 'end'],
        [0, -r - 4, 'middle'], [0, r + 13, 'middle'], [r + 2, 4, 'start'], [-r - 2, 4, 'end'],
        [r + 8, -r - 8, 'start'], [r + 8, r + 16, 'start'], [-r - 8, -r - 8, 'end'], [-r - 8, r + 16, 'end']];
      for (var i = 0; i < cands.length; i++) {
        var c = cands[i];
        var t = put(self.labels, sv('text', { x: d.x + c[0], y: d.y + c[1], 'text-anchor': c[2], 'class': 'rk-label' }, w.text));
        var bb = t.getBBox();
        var box = { x: bb.x - 1, y: bb.y, w: bb.width + 2, h: bb.height };
        var inside = box.x >= M.l + 2 && box.x + box.w <= W - M.r - 2 && box.y >= M.t + 2 && box.y + box.h <= H - M.b - 2;
        var free = inside && !obstacles.some(function (o) {
          return (!o.d || (Math.abs(o.d.x - d.x) >= 2 || Math.abs(o.d.y - d.y) >= 2)) && overlaps(o, box);
        });
        if (free) {
          t.setAttribute('data-for', d.s.id + ':' + d.i);
          obstacles.push(box);
          if (w.prio === 2) sized++;
          return;
        }
        self.labels.removeChild(t);
      }
    });
  };

  Chart.prototype.drawLegend = function () {
    var self = this, legend = this.legend;
    while (legend.firstChild) legend.removeChild(legend.firstChild);
    this.counts = {};
    this.spec.series.forEach(function (s) {
      var n = s.points.filter(function (p) { return self.visible(s, p) || self.hidden[s.id]; }).length;
      self.counts[s.id] = n;
      var label = el('label', { 'class': 'rk-legend-item', 'data-series': s.id, title: s.hint || null });
      var box = el('input', { type: 'checkbox' });
      box.checked = !self.hidden[s.id];
      box.addEventListener('change', function () { self.hidden[s.id] = !box.checked; self.draw(); });
      var sw = sv('svg', { width: 18, height: 18, viewBox: '0 0 18 18' });
      add(sw, sv('path', { d: shapePath(s.shape, 9, 9, s.shape === 'diamond' ? 5.5 : 6), fill: s.hollow ? '#fff' : s.colour,
        stroke: s.colour, 'stroke-width': 1.5, 'fill-opacity': s.hollow ? 1 : 0.8 }));
      add(legend, add(label, box, sw, el('span', null, s.label + ' (' + n + ')')));
    });
    if (this.spec.series.some(function (s) { return s.sized; })) {
      add(legend, el('span', { 'class': 'rk-legend-note' }, 'marker area \u221d share of the predicted step; hover a point for its figures'));
    } else {
      add(legend, el('span', { 'class': 'rk-legend-note' }, 'hover a point for its figures'));
    }
  };

  Chart.prototype.drawOmitted = function () {
    var parts = [];
    this.spec.series.forEach(function (s) {
      if (s.omitted && s.omitted.length) {
        var names = s.omitted.slice(0, 12).join(', ') +
          (s.omitted.length > 12 ? ' and ' + (s.omitted.length - 12) + ' more (in the table)' : '');
        parts.push(s.label + ': ' + s.omitted.length + ' (' + names + ')');
      }
    });
    this.omitted.textContent = parts.length ? 'Not drawn, having no FLOPs (intensity 0 has no place on log axes): ' + parts.join('; ') : '';
  };

  Chart.prototype.showTip = function (d, ev) {
    var tip = this.tip;
    while (tip.firstChild) tip.removeChild(tip.firstChild);
    add(tip, el('div', { 'class': 'rk-tip-title' }, d.p.n), el('div', { 'class': 'rk-tip-series' }, d.s.label));
    var dl = el('dl');
    (d.p.tip || []).forEach(function (it) {
      if (missing(it[1])) return;
      add(dl, el('dt', null, it[0]), el('dd', null, value(it[1], it[2], it[3])));
    });
    add(tip, dl);
    if (d.group && d.group.length > 1) {
      var others = d.group.filter(function (x) { return x !== d; }).map(function (x) { return x.p.n; });
      add(tip, el('div', { 'class': 'rk-tip-more' }, '+' + others.length + ' more at this point: ' +
        others.slice(0, 4).join(', ') + (others.length > 4 ? ', \u2026' : '')));
    }
    tip.hidden = false;
    d.node.classList.add('rk-hover');
    this.hovered = d;
    this.moveTip(ev);
  };

  Chart.prototype.moveTip = function (ev) {
    var box = this.tip.parentNode.getBoundingClientRect();
    var x = ev.clientX - box.left + 14, y = ev.clientY - box.top + 14;
    var w = this.tip.offsetWidth, h = this.tip.offsetHeight;
    if (x + w > box.width) x = Math.max(0, ev.clientX - box.left - w - 14);
    if (y + h > box.height) y = Math.max(0, ev.clientY - box.top - h - 14);
    this.tip.style.left = x + 'px';
    this.tip.style.top = y + 'px';
  };

  Chart.prototype.hideTip = function () {
    this.tip.hidden = true;
    if (this.hovered) this.hovered.node.classList.remove('rk-hover');
    this.hovered = null;
  };

  Chart.prototype.highlight = function (sid, name, on) {
    this.drawn.forEach(function (d) {
      if (d.s.id === sid && d.p.n === name) d.node.classList.toggle('rk-hl', on);
    });
  };

  Chart.prototype.select = function (b, c) {
    this.selection = { b: b, c: c };
    this.draw();
  };

  // -- the levers chart (advise): each lever a bar from the baseline (1x) to its speed-up ------------

  function BarChart(spec, host) {
    var self = this;
    this.spec = spec;
    var bars = spec.bars, BW = 960, rowH = 26, L = 250, R = 120, T = 10, B = 46;
    var BH = T + B + rowH * Math.max(1, bars.length);
    var wrap = put(host, el('div', { 'class': 'rk-chart-wrap' }));
    var legend = put(wrap, el('div', { 'class': 'rk-legend', id: 'rk-legend' }));
    add(legend, add(el('span', { 'class': 'rk-legend-item', 'data-series': spec.series }),
      el('span', null, 'levers (' + bars.length + '); colour: what binds afterwards \u2014')));
    spec.legend.forEach(function (k) {
      var sw = sv('svg', { width: 14, height: 14, viewBox: '0 0 14 14' });
      add(sw, sv('rect', { x: 1, y: 1, width: 12, height: 12, fill: k[1] }));
      add(legend, add(el('span', { 'class': 'rk-legend-key' }), sw, el('span', null, k[0])));
    });
    var box = put(wrap, el('div', { 'class': 'rk-chart', id: 'rk-chart' }));
    var svg = put(box, sv('svg', { viewBox: '0 0 ' + BW + ' ' + BH, role: 'img', 'aria-label': 'levers chart' }));
    this.tip = put(box, el('div', { 'class': 'rk-tip', id: 'rk-tip', hidden: '' }));
    var vs = bars.map(function (b) { return b.v; }).concat([1]);
    var lo = Math.min.apply(null, vs) / 1.25, hi = Math.max.apply(null, vs) * 1.25;
    var l0 = log10(lo), l1 = log10(hi);
    function X(v) { return L + (log10(v) - l0) / (l1 - l0) * (BW - L - R); }
    var grid = put(svg, sv('g', { 'class': 'rk-grid' })), axes = put(svg, sv('g', { 'class': 'rk-axes' }));
    [0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000].forEach(function (t) {
      if (t < lo || t > hi) return;
      add(grid, sv('line', { x1: X(t), x2: X(t), y1: T, y2: BH - B }));
      add(axes, sv('text', { x: X(t), y: BH - B + 16, 'text-anchor': 'middle' }, plain(t) + '\u00d7'));
    });
    add(axes, sv('text', { x: (L + BW - R) / 2, y: BH - 8, 'text-anchor': 'middle', 'class': 'rk-axis-title' }, spec.label));
    this.drawn = [];
    bars.forEach(function (b, i) {
      var y = T + i * rowH + 4, x1 = X(Math.min(1, b.v)), x2 = X(Math.max(1, b.v));
      var rect = put(svg, sv('rect', { x: x1, y: y, width: Math.max(1, x2 - x1), height: rowH - 8, fill: b.c,
        'fill-opacity': b.fits === false ? 0.35 : 0.85, stroke: b.c, 'class': 'rk-point rk-bar',
        'data-series': spec.series, 'data-index': i, 'data-name': b.n }));
      var name = put(svg, sv('text', { x: L - 8, y: y + rowH / 2, 'text-anchor': 'end', 'class': 'rk-bar-name' }, b.n));
      if (name.getComputedTextLength() > L - 12) name.setAttribute('textLength', String(L - 12));
      var value = put(svg, sv('text', { x: x2 + 5, y: y + rowH / 2, 'class': 'rk-bar-value' },
        num(b.v, 'x') + (b.fits === false ? ', does not fit' : '')));
      if (x2 + 5 + value.getComputedTextLength() > BW - R - 2) {  // past the frame: inside the bar's end
        value.setAttribute('x', String(x2 - 5));
        value.setAttribute('text-anchor', 'end');
        value.setAttribute('class', 'rk-bar-value rk-bar-value-inside');
      }
      var d = { s: { id: spec.series, label: 'lever' }, p: { n: b.n, tip: b.tip }, node: rect };
      rect.addEventListener('mouseenter', function (ev) { Chart.prototype.showTip.call(self, d, ev); });
      rect.addEventListener('mousemove', function (ev) { Chart.prototype.moveTip.call(self, ev); });
      rect.addEventListener('mouseleave', function () { Chart.prototype.hideTip.call(self); });
      self.drawn.push(d);
    });
    add(svg, sv('line', { x1: X(1), x2: X(1), y1: T, y2: BH - B, 'class': 'rk-baseline' }));
    add(svg, sv('rect', { x: L, y: T, width: BW - L - R, height: BH - B - T, 'class': 'rk-frame' }));
  }

  BarChart.prototype.highlight = Chart.prototype.highlight;

  // -- sortable tables --------------------------------------------------------------------------------

  function sortValue(v) {
    return Array.isArray(v) ? v[0] : v;
  }

  var collator = new Intl.Collator('en', { numeric: true, sensitivity: 'base' });

  function compareValues(a, b) {
    a = sortValue(a); b = sortValue(b);
    if (typeof a === 'number' && typeof b === 'number') return a - b;
    if (typeof a === 'boolean' && typeof b === 'boolean') return (a ? 1 : 0) - (b ? 1 : 0);
    return collator.compare(String(a), String(b));
  }

  function Table(spec, host, chart) {
    var self = this;
    this.spec = spec;
    this.chart = chart;
    this.showAll = false;
    this.filter = '';
    this.order = spec.rows.map(function (_, i) { return i; });
    this.sortCol = null;
    this.sortDir = null;
    var section = put(host, el('section', { 'class': 'rk-table-section', id: 'rk-table-' + spec.id, 'data-table': spec.id }));
    var head = put(section, el('div', { 'class': 'rk-table-head' }));
    add(head, el('h2', null, spec.title + ' (' + spec.total.toLocaleString('en-US') + ')'));
    var input = put(head, el('input', { type: 'search', placeholder: 'filter', 'aria-label': 'filter ' + spec.title }));
    input.addEventListener('input', function () { self.filter = input.value.toLowerCase(); self.render(); });
    if (spec.caption) add(section, el('p', { 'class': 'rk-caption' }, spec.caption));
    var scroller = put(section, el('div', { 'class': 'rk-scroll' }));
    this.table = put(scroller, el('table', { 'class': 'rk-table' }));
    var tr = put(put(this.table, el('thead')), el('tr'));
    this.ths = spec.columns.map(function (c, i) {
      var numeric = c.f !== 'text' && c.f !== 'bool';
      var th = put(tr, el('th', { scope: 'col', title: c.hint || null, 'class': numeric ? 'rk-num' : null, 'aria-sort': 'none' }));
      var button = put(th, el('button', { type: 'button' }, c.label + (c.u && c.f !== 'si' && c.f !== 'num' ? '' : '')));
      add(button, el('span', { 'class': 'rk-arrow' }));
      button.addEventListener('click', function () {
        var dir = self.sortCol === i ? (self.sortDir === 'desc' ? 'asc' : 'desc') : (numeric ? 'desc' : 'asc');
        self.sort(i, dir);
      });
      return th;
    });
    this.tbody = put(this.table, el('tbody'));
    this.foot = put(section, el('div', { 'class': 'rk-table-foot' }));
    if (spec.sort) this.sort(spec.sort[0], spec.sort[1]);
    else this.render();
  }

  Table.prototype.sort = function (col, dir) {
    var rows = this.spec.rows, sign = dir === 'desc' ? -1 : 1;
    this.order = rows.map(function (_, i) { return i; });
    this.order.sort(function (i, j) {
      var a = sortValue(rows[i][col]), b = sortValue(rows[j][col]);
      var ma = missing(a), mb = missing(b);
      if (ma || mb) return ma === mb ? i - j : (ma ? 1 : -1); // missing values last, either way
      return sign * compareValues(a, b) || i - j;
    });
    this.sortCol = col;
    this.sortDir = dir;
    this.ths.forEach(function (th, i) {
      th.setAttribute('aria-sort', i === col ? (dir === 'desc' ? 'descending' : 'ascending') : 'none');
    });
    this.render();
  };

  Table.prototype.matches = function (row) {
    if (!this.filter) return true;
    var f = this.filter;
    return row.some(function (v) { return typeof v === 'string' && v.toLowerCase().indexOf(f) >= 0; });
  };

  Table.prototype.render = function () {
    var self = this, spec = this.spec, cols = spec.columns;
    var rows = this.order.filter(function (i) { return self.matches(spec.rows[i]); });
    var shown = this.showAll ? rows : rows.slice(0, spec.limit);
    var body = el('tbody');
    shown.forEach(function (i) {
      var row = spec.rows[i];
      var tr = put(body, el('tr', { 'data-row': i }));
      row.forEach(function (v, c) {
        var kind = cols[c].f;
        var text = value(v, kind, cols[c].u);
        var numeric = kind !== 'text' && kind !== 'bool' && typeof sortValue(v) === 'number';
        var cls = numeric ? 'rk-num' : (typeof v === 'string' && v.length > 40 ? 'rk-long' : null);
        if (cls !== 'rk-long') {
          add(tr, el('td', { 'class': cls }, text));
          return;
        }
        // a long text: three lines, the rest on hover (title) or a click, so one note keeps no row tall
        var td = put(tr, el('td', { 'class': cls, title: v }));
        put(td, el('div', { 'class': 'rk-clamp' }, text));
        td.addEventListener('click', function () { td.classList.toggle('rk-open'); });
      });
      if (spec.series && self.chart) {
        tr.addEventListener('mouseenter', function () { self.chart.highlight(spec.series, row[0], true); });
        tr.addEventListener('mouseleave', function () { self.chart.highlight(spec.series, row[0], false); });
      }
      if (spec.selects && api.select) {
        tr.classList.add('rk-clickable');
        tr.addEventListener('click', function () { api.select(row[0], row[1]); });
        if (self.chart && self.chart.selection && row[0] === self.chart.selection.b && row[1] === self.chart.selection.c) {
          tr.classList.add('rk-selected');
        }
      }
    });
    this.table.replaceChild(body, this.tbody);
    this.tbody = body;
    var foot = this.foot;
    while (foot.firstChild) foot.removeChild(foot.firstChild);
    var text = 'showing ' + shown.length.toLocaleString('en-US') + ' of ' + rows.length.toLocaleString('en-US') +
      (rows.length !== spec.rows.length ? ' matching' : '') +
      (spec.total > spec.rows.length ? ' (' + spec.total.toLocaleString('en-US') + ' in the report)' : '');
    add(foot, el('span', null, text));
    if (rows.length > spec.limit) {
      var b = put(foot, el('button', { type: 'button', 'class': 'rk-more' }, this.showAll ? 'show the top ' + spec.limit : 'show all'));
      b.addEventListener('click', function () { self.showAll = !self.showAll; self.render(); });
    }
  };

  /* The column values in display order (tests read tables through this and through the DOM). */
  Table.prototype.column = function (col) {
    var rows = Array.prototype.slice.call(this.tbody.rows);
    return rows.map(function (tr) { return sortValue(this.spec.rows[Number(tr.getAttribute('data-row'))][col]); }, this);
  };

  // -- the sweep selector ------------------------------------------------------------------------------

  function renderSelector(host, chart) {
    var sel = data.selector;
    var bar = put(host, el('div', { 'class': 'rk-selector', id: 'rk-selector' }));
    var bLabel = put(bar, el('label', null, 'batch '));
    var bSelect = put(bLabel, el('select', { id: 'rk-batch' }));
    sel.batches.forEach(function (b) { add(bSelect, el('option', { value: b }, String(b))); });
    var slider = put(bar, el('input', { type: 'range', min: 0, max: sel.batches.length - 1, step: 1, id: 'rk-batch-slider',
      'aria-label': 'batch' }));
    var cLabel = put(bar, el('label', null, 'context '));
    var cSelect = put(cLabel, el('select', { id: 'rk-context' }));
    sel.contexts.forEach(function (c) { add(cSelect, el('option', { value: c }, int(c))); });
    var status = put(bar, el('span', { 'class': 'rk-selected-point', id: 'rk-selected-point' }));
    function sync() {
      var s = chart.selection;
      bSelect.value = String(s.b);
      cSelect.value = String(s.c);
      slider.value = String(sel.batches.indexOf(s.b));
      var p = data.chart.series.filter(function (x) { return x.id === 'step'; })[0];
      var pt = p && p.points.filter(function (q) { return q.b === s.b && q.c === s.c; })[0];
      status.textContent = 'B=' + s.b + ', S=' + int(s.c) + (pt ? ': ' + num(pt.x, 'FLOP/B') + ', ' + si(pt.y, 'FLOP/s') : ': not in the sweep');
    }
    api.select = function (b, c) {
      chart.select(Number(b), Number(c));
      sync();
      api.tables.forEach(function (t) { if (t.spec.selects) t.render(); });
    };
    bSelect.addEventListener('change', function () { api.select(bSelect.value, chart.selection.c); });
    cSelect.addEventListener('change', function () { api.select(chart.selection.b, cSelect.value); });
    slider.addEventListener('input', function () { api.select(sel.batches[Number(slider.value)], chart.selection.c); });
    sync();
  }

  // -- the page ------------------------------------------------------------------------------------------

  var api = { data: data, fmt: fmt, chart: null, tables: [], select: null };
  window.rooflinekit = api;

  var app = document.getElementById('rk-app');
  renderHeader(app);
  var hasPoints = data.chart && data.chart.series.some(function (s) { return s.points.length; });
  if (data.bars && data.bars.bars.length) {
    var barSection = add(app, el('section', { 'class': 'rk-chart-section', id: 'rk-levers' }));
    add(barSection, el('h2', null, 'Levers'));
    api.chart = new BarChart(data.bars, put(barSection, el('div')));
  } else if (hasPoints) {
    var chartSection = put(app, el('section', { 'class': 'rk-chart-section', id: 'rk-roofline' }));
    add(chartSection, el('h2', null, 'Roofline'));
    var selectorHost = put(chartSection, el('div'));
    var chartHost = put(chartSection, el('div'));  // in the document first: labels are measured
    api.chart = new Chart(data.chart, chartHost);
    if (data.selector) renderSelector(selectorHost, api.chart);
  }
  var tablesHost = put(app, el('div', { 'class': 'rk-tables' }));
  (data.tables || []).forEach(function (spec) {
    api.tables.push(new Table(spec, tablesHost, api.chart));
  });
  api.table = function (id) { return api.tables.filter(function (t) { return t.spec.id === id; })[0]; };
  add(app, el('footer', { 'class': 'rk-foot' }, 'Generated by ' + data.tool +
    '. A self-contained file: no network, no external scripts. Every number has the units shown; ' +
    'the JSON report (-f json) holds them all at full precision.'));
  document.body.setAttribute('data-ready', '1');
})();
