/* rooflinekit plan page: hover tooltips on the Pareto chart and sortable table columns. The chart
   and the table are in the page already; this only adds behaviour. No library, no network. */
(function () {
  'use strict';

  var node = document.getElementById('rk-plan-data');
  var tips = node ? JSON.parse(node.textContent).tips || {} : {};
  var box = document.getElementById('rk-plan-chart');
  var tip = document.getElementById('rk-tip');
  var svg = document.getElementById('rk-plan-svg');

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function show(point, event) {
    var t = tips[point.getAttribute('data-i')];
    if (!t || !tip) return;
    tip.textContent = '';
    tip.appendChild(el('div', 'rk-tip-title', t[0]));
    tip.appendChild(el('div', 'rk-tip-series', t[1]));
    var dl = el('dl');
    t[2].forEach(function (pair) {
      dl.appendChild(el('dt', '', pair[0]));
      dl.appendChild(el('dd', '', pair[1]));
    });
    tip.appendChild(dl);
    tip.hidden = false;
    var r = box.getBoundingClientRect();
    var x = event.clientX - r.left + 14, y = event.clientY - r.top + 14;
    if (x + tip.offsetWidth > r.width) x = Math.max(0, event.clientX - r.left - tip.offsetWidth - 14);
    if (y + tip.offsetHeight > r.height) y = Math.max(0, event.clientY - r.top - tip.offsetHeight - 14);
    tip.style.left = x + 'px';
    tip.style.top = y + 'px';
  }

  function hide() { if (tip) tip.hidden = true; }

  function pointOf(i) {
    return svg ? svg.querySelector('circle.rk-point[data-i="' + i + '"]') : null;
  }

  if (svg) {
    svg.addEventListener('mousemove', function (event) {
      var p = event.target.closest ? event.target.closest('circle.rk-point') : null;
      if (p) {
        var old = svg.querySelector('circle.rk-hover');
        if (old && old !== p) old.classList.remove('rk-hover');
        p.classList.add('rk-hover');
        show(p, event);
      } else {
        var h = svg.querySelector('circle.rk-hover');
        if (h) h.classList.remove('rk-hover');
        hide();
      }
    });
    svg.addEventListener('mouseleave', function () {
      var h = svg.querySelector('circle.rk-hover');
      if (h) h.classList.remove('rk-hover');
      hide();
    });
  }

  // -- the table: sort by a header's column; hovering a row rings its point -------------------------

  var table = document.getElementById('rk-plan-table');
  if (!table) return;
  var heads = table.querySelectorAll('thead th');
  var body = table.tBodies[0];

  function sortBy(k) {
    var th = heads[k];
    var numeric = th.getAttribute('data-kind') === 'num';
    var dir = th.getAttribute('aria-sort') === 'descending' ? 'ascending' : 'descending';
    if (!th.hasAttribute('aria-sort') && !numeric) dir = 'ascending';
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = a.cells[k].getAttribute('data-v'), y = b.cells[k].getAttribute('data-v');
      var c;
      if (numeric) {
        var fx = x === '' ? -Infinity : parseFloat(x), fy = y === '' ? -Infinity : parseFloat(y);
        c = fx - fy;
      } else {
        c = x.localeCompare(y);
      }
      return dir === 'ascending' ? c : -c;
    });
    rows.forEach(function (r) { body.appendChild(r); });
    Array.prototype.forEach.call(heads, function (h) { h.removeAttribute('aria-sort'); });
    th.setAttribute('aria-sort', dir);
  }

  Array.prototype.forEach.call(heads, function (th, k) {
    var button = th.querySelector('button');
    if (button) button.addEventListener('click', function () { sortBy(k); });
  });
  body.addEventListener('mouseover', function (event) {
    var row = event.target.closest('tr');
    var p = row ? pointOf(row.getAttribute('data-i')) : null;
    var old = svg ? svg.querySelector('circle.rk-hl') : null;
    if (old && old !== p) old.classList.remove('rk-hl');
    if (p) { p.classList.add('rk-hl'); p.parentNode.appendChild(p); }
  });
  body.addEventListener('mouseleave', function () {
    var old = svg ? svg.querySelector('circle.rk-hl') : null;
    if (old) old.classList.remove('rk-hl');
  });
  window.rooflinekitPlan = { sortBy: sortBy, tips: tips };
})();
