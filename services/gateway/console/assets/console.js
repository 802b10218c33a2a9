/* activity-gateway console: messages for htmx calls, the narrow menu, busy buttons, the live tail (server-sent events) and the charts (Chart.js). Times in UTC, as the server-rendered pages show them. */
(function () {
  'use strict'

  /** UTC as the pages write it: 2025-01-31 12:00:05 UTC (`short`: 12:00 UTC). */
  function utc(ms, short) {
    var iso = new Date(ms).toISOString()
    return short ? iso.slice(11, 16) : iso.slice(0, 19).replace('T', ' ') + ' UTC'
  }

  /** kind: error (default), info / pass (green), transient / warn (amber), invalid (red). */
  function flash(message, kind) {
    var el = document.getElementById('flash')
    if (!el) return
    el.textContent = message
    var k = kind || 'error'
    el.className = 'flash' + (k === 'error' || k === 'invalid' ? '' : ' ' + k)
    el.setAttribute('data-kind', k)
    el.setAttribute('role', k === 'error' || k === 'invalid' ? 'alert' : 'status')
    el.hidden = false
    clearTimeout(flash.timer)
    flash.timer = setTimeout(function () { el.hidden = true }, 8000)
  }

  /** A Problem's detail (console API errors are v2 Problems), or the status line. */
  function problemText(xhr) {
    try {
      var p = JSON.parse(xhr.responseText)
      // invalid-request names each problem in errors[].message; its detail is generic.
      if (p.errors && p.errors.length) return p.errors.map(function (e) { return e.message }).join(' · ')
      return p.detail || p.title || ('HTTP ' + xhr.status)
    } catch {
      return 'HTTP ' + xhr.status + ' ' + (xhr.statusText || '')
    }
  }

  document.addEventListener('htmx:responseError', function (e) { flash(problemText(e.detail.xhr)) })
  document.addEventListener('htmx:sendError', function () { flash('The gateway could not be reached.') })
  document.addEventListener('htmx:afterRequest', function (e) {
    var msg = e.detail.successful && e.detail.xhr && e.detail.xhr.getResponseHeader('x-console-message')
    if (msg) flash(decodeURIComponent(msg), e.detail.xhr.getResponseHeader('x-console-message-kind') || 'info')
    busy(e.detail.elt, false)
    var form = e.detail.elt
    if (e.detail.successful && form && form.hasAttribute && form.hasAttribute('data-reset-on-success')) form.reset()
  })

  /** The button that started a request says it is busy until the answer is in. */
  function busyButton(elt) {
    if (!elt || !elt.tagName) return null
    if (elt.tagName === 'FORM') return elt.querySelector('button[type=submit], button:not([type])')
    return elt.tagName === 'BUTTON' ? elt : null
  }
  function busy(elt, on) {
    var b = busyButton(elt)
    if (!b) return
    if (on) b.setAttribute('aria-busy', 'true')
    else b.removeAttribute('aria-busy')
  }
  document.addEventListener('htmx:beforeRequest', function (e) { busy(e.detail.elt, true) })
  document.addEventListener('htmx:sendError', function (e) { busy(e.detail.elt, false) })

  function cell(row, text, cls) {
    var td = document.createElement('td')
    td.textContent = text == null ? '' : String(text)
    if (cls) td.className = cls
    row.appendChild(td)
    return td
  }

  function startTail(box) {
    var body = box.querySelector('tbody')
    var state = document.querySelector('[data-tail-state]')
    var detailBase = box.getAttribute('data-detail-base')
    var source = new EventSource(box.getAttribute('data-tail-src'))
    source.addEventListener('open', function () { if (state) state.textContent = 'connected' })
    source.addEventListener('error', function () { if (state) state.textContent = 'reconnecting…' })
    source.addEventListener('attempt', function (ev) {
      var a = JSON.parse(ev.data)
      var empty = body.querySelector('tr.empty-row')
      if (empty) body.removeChild(empty)
      var tr = document.createElement('tr')
      tr.className = 'new'
      tr.setAttribute('data-delivery', a.delivery_id)
      if (a.replay_job) tr.setAttribute('data-replay', a.replay_job)
      cell(tr, utc(a.at))
      var link = document.createElement('a')
      link.href = detailBase + encodeURIComponent(a.delivery_id)
      link.textContent = a.delivery_id
      cell(tr, '').appendChild(link)
      cell(tr, (a.event_type || '') + (a.replay_job ? ' (replay)' : ''))
      cell(tr, a.outcome, a.outcome === 'delivered' ? 'ok' : 'bad')
      cell(tr, a.status == null ? (a.error || '') : a.status)
      cell(tr, a.ms + ' ms', 'hide-narrow')
      body.insertBefore(tr, body.firstChild)
      while (body.children.length > 200) body.removeChild(body.lastChild)
    })
  }

  function lineChart(canvas, labels, sets, yTitle, max) {
    return new Chart(canvas, {
      type: 'line',
      data: { labels: labels, datasets: sets },
      options: {
        animation: false, maintainAspectRatio: false, spanGaps: true,
        interaction: { mode: 'index', intersect: false },
        scales: { y: { beginAtZero: true, max: max, title: { display: true, text: yTitle } }, x: { ticks: { maxTicksLimit: 8 }, title: { display: true, text: 'time (UTC)' } } },
        plugins: { legend: { position: 'bottom' } }
      }
    })
  }

  var charts = []
  function drawCharts(box) {
    fetch(box.getAttribute('data-chart-src'), { credentials: 'same-origin', headers: { accept: 'application/json' } })
      .then(function (r) { if (!r.ok) throw new Error('HTTP ' + r.status); return r.json() })
      .then(function (s) {
        charts.forEach(function (c) { c.destroy() })
        var labels = s.points.map(function (p) { return utc(p.t, true) })
        var col = function (k) { return s.points.map(function (p) { return p[k] }) }
        // A value with no neighbour (one busy bucket in a quiet day) is a line of length zero: it gets a dot.
        var dots = function (k) {
          var d = col(k)
          return d.map(function (v, i) { return v != null && v !== 0 && !(d[i - 1] != null && d[i - 1] !== 0) && !(d[i + 1] != null && d[i + 1] !== 0) ? 3 : 0 })
        }
        box.setAttribute('data-total', String(s.total))
        var empty = document.querySelector('[data-charts-empty]')
        if (empty) empty.hidden = s.total > 0
        charts = [
          lineChart(box.querySelector('[data-chart=rate]'), labels, [{ label: 'deliveries / min', data: col('per_minute'), borderColor: '#1d6fd6', pointRadius: dots('per_minute') }], 'per minute'),
          lineChart(box.querySelector('[data-chart=success]'), labels, [{ label: 'success rate %', data: col('success_pct'), borderColor: '#16803c', pointRadius: dots('success_pct') }], '%', 100),
          lineChart(box.querySelector('[data-chart=latency]'), labels, [
            { label: 'p50 ms', data: col('p50_ms'), borderColor: '#7a4fd6', pointRadius: dots('p50_ms') },
            { label: 'p99 ms', data: col('p99_ms'), borderColor: '#c22b2b', pointRadius: dots('p99_ms') }
          ], 'ms')
        ]
        describeCharts(box, s)
        box.setAttribute('data-ready', 'true')
      })
      .catch(function (err) { flash('Charts: ' + err.message) })
  }

  /** The text alternative of the charts: a sentence per chart (the canvas's label) and a table of the buckets with attempts. */
  function describeCharts(box, s) {
    var busyPoints = s.points.filter(function (p) { return p.count > 0 })
    var span = s.points.length ? utc(s.points[0].t) + ' to ' + utc(s.points[s.points.length - 1].t) : ''
    var say = function (name, text) { var c = box.querySelector('[data-chart=' + name + ']'); if (c) c.setAttribute('aria-label', text) }
    if (busyPoints.length === 0) {
      ['rate', 'success', 'latency'].forEach(function (n) { say(n, 'No delivery attempt from ' + span + '.') })
    } else {
      var peak = busyPoints.reduce(function (a, b) { return b.per_minute > a.per_minute ? b : a })
      var ok = busyPoints.reduce(function (a, p) { return a + p.count * (p.success_pct || 0) / 100 }, 0)
      var slow = busyPoints.reduce(function (a, b) { return (b.p99_ms || 0) > (a.p99_ms || 0) ? b : a })
      say('rate', s.total + ' attempts from ' + span + '; busiest ' + peak.per_minute + ' per minute at ' + utc(peak.t) + '.')
      say('success', 'Success rate ' + Math.round(ok / s.total * 1000) / 10 + ' % over ' + s.total + ' attempts from ' + span + '.')
      say('latency', 'Slowest p99 ' + slow.p99_ms + ' ms at ' + utc(slow.t) + '.')
    }
    var body = document.querySelector('#chart-table tbody')
    if (!body) return
    body.textContent = ''
    busyPoints.forEach(function (p) {
      var tr = document.createElement('tr')
      ;[utc(p.t), p.count, p.per_minute, p.success_pct == null ? '—' : p.success_pct + ' %', p.p50_ms == null ? '—' : p.p50_ms + ' ms', p.p99_ms == null ? '—' : p.p99_ms + ' ms'].forEach(function (v) { cell(tr, v) })
      body.appendChild(tr)
    })
    if (busyPoints.length === 0) { var tr = document.createElement('tr'); cell(tr, 'No attempt in this range.').colSpan = 6; body.appendChild(tr) }
  }

  /** A webhook picker: the app's webhooks, read from the webhooks part of the console. */
  function webhookOptions(select) {
    fetch(select.getAttribute('data-webhook-options'), { credentials: 'same-origin', headers: { accept: 'application/json' } })
      .then(function (r) { if (!r.ok) throw new Error('HTTP ' + r.status); return r.json() })
      .then(function (list) {
        list.data.forEach(function (w) {
          var o = document.createElement('option')
          o.value = w.id
          o.textContent = w.id + ' · ' + w.url + (w.valid ? '' : ' (invalid)')
          select.appendChild(o)
        })
        select.setAttribute('data-ready', 'true')
      })
      .catch(function (err) { flash('Webhooks: ' + err.message) })
  }

  /** A table or text larger than its box scrolls: reachable and named for keyboard users. */
  function scrollables() {
    document.querySelectorAll('.table-wrap, pre').forEach(function (el) {
      if ((el.scrollWidth <= el.clientWidth + 1 && el.scrollHeight <= el.clientHeight + 1) || el.hasAttribute('tabindex')) return
      var heading = el.closest('section') && el.closest('section').querySelector('h1, h2, h3')
      el.tabIndex = 0
      el.setAttribute('role', 'region')
      el.setAttribute('aria-label', (heading ? heading.textContent.trim() + ': ' : '') + (el.tagName === 'PRE' ? 'text' : 'table') + ', scrolls')
    })
  }
  document.addEventListener('htmx:afterSettle', scrollables)

  /** The narrow layout's menu: a real button (keyboard and screen readers), open or closed. */
  function menu(button) {
    var top = button.closest('.top')
    button.addEventListener('click', function () {
      var open = !top.classList.contains('open')
      top.classList.toggle('open', open)
      button.setAttribute('aria-expanded', String(open))
    })
  }

  function barChart(box) {
    var data = JSON.parse(box.getAttribute('data-bar-chart'))
    new Chart(box.querySelector('canvas'), {
      type: 'bar',
      data: { labels: data.labels, datasets: [{ label: 'messages behind', data: data.values, backgroundColor: '#1d6fd6' }] },
      options: { animation: false, maintainAspectRatio: false, indexAxis: 'y', scales: { x: { beginAtZero: true } }, plugins: { legend: { display: false } } }
    })
    box.setAttribute('data-ready', 'true')
  }

  document.addEventListener('DOMContentLoaded', function () {
    document.querySelectorAll('.nav-button').forEach(menu)
    document.querySelectorAll('[data-webhook-options]').forEach(webhookOptions)
    scrollables()
    document.querySelectorAll('[data-bar-chart]').forEach(barChart)
    document.querySelectorAll('[data-tail-src]').forEach(startTail)
    document.querySelectorAll('[data-chart-src]').forEach(drawCharts)
  })
})()
