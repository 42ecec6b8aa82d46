// reprise web page: countdowns, and a run page that follows its run.
// The page works without this script; it only keeps the page current.
(function () {
  'use strict';

  function rough(s) {
    if (s < 60) return s + 's';
    var m = Math.floor(s / 60);
    if (m < 60) return m + 'm' + (s % 60 ? (s % 60) + 's' : '');
    var h = Math.floor(m / 60);
    return h + 'h' + (m % 60 ? (m % 60) + 'm' : '');
  }

  function tick() {
    var now = Date.now();
    document.querySelectorAll('time[data-countdown]').forEach(function (el) {
      var at = Date.parse(el.getAttribute('datetime'));
      if (isNaN(at)) return;
      var s = Math.round((at - now) / 1000);
      el.textContent = s > 0 ? 'in ' + rough(s) : 'due now';
    });
  }
  tick();
  setInterval(tick, 1000);

  var live = document.getElementById('live');
  if (!live || live.dataset.final === 'true' || !window.EventSource || !window.fetch) return;
  var status = live.querySelector('.live-status');
  var busy = false, again = false;

  // refresh reads the page again and swaps in its run, keeping the
  // details the reader opened or closed.
  function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    fetch(location.pathname + location.search, { credentials: 'same-origin', headers: { 'Accept': 'text/html' } })
      .then(function (res) {
        if (!res.ok) throw new Error('status ' + res.status);
        return res.text();
      })
      .then(function (html) {
        var doc = new DOMParser().parseFromString(html, 'text/html');
        var fresh = doc.getElementById('run'), cur = document.getElementById('run');
        if (!fresh || !cur) return;
        var open = {};
        cur.querySelectorAll('details[id]').forEach(function (d) { open[d.id] = d.open; });
        fresh.querySelectorAll('details[id]').forEach(function (d) {
          if (d.id in open) d.open = open[d.id];
        });
        cur.replaceWith(document.importNode(fresh, true));
        tick();
        if (status) status.textContent = 'Updated ' + new Date().toLocaleTimeString();
      })
      .catch(function (err) {
        if (status) status.textContent = 'Could not update the page (' + err.message + '); reload it.';
      })
      .finally(function () {
        busy = false;
        if (again) { again = false; refresh(); }
      });
  }

  var es = new EventSource(live.dataset.src);
  es.addEventListener('history', function () { refresh(); });
  es.addEventListener('end', function () { es.close(); refresh(); if (status) status.textContent = 'The run has ended.'; });
  es.onerror = function () {
    if (es.readyState === EventSource.CLOSED && status) status.textContent = 'Live updates stopped; reload the page.';
  };
})();
