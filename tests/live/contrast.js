(function () {
  function rgb(s) {
    var m = /rgba?\(([^)]+)\)/.exec(s || "");
    if (!m) return null;
    var p = m[1].split(",").map(parseFloat);
    return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1];
  }
  function lum(c) {
    var a = c.slice(0, 3).map(function (v) {
      v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4);
    });
    return 0.2126 * a[0] + 0.7152 * a[1] + 0.0722 * a[2];
  }
  function under(el) {
    var layers = [];
    for (var e = el; e; e = e.parentElement) {
      var c = rgb(getComputedStyle(e).backgroundColor);
      if (c && c[3] > 0) { layers.push(c); if (c[3] >= 1) break; }
    }
    var out = [255, 255, 255];
    for (var i = layers.length - 1; i >= 0; i--) {
      var c = layers[i];
      out = [0, 1, 2].map(function (k) { return c[k] * c[3] + out[k] * (1 - c[3]); });
    }
    return out;
  }
  var found = [];
  document.querySelectorAll("body *").forEach(function (el) {
    if (el.id === "k3-contrast" || el.tagName === "SCRIPT" || el.tagName === "STYLE") return;
    var own = Array.prototype.some.call(el.childNodes, function (n) {
      return n.nodeType === 3 && n.textContent.trim();
    });
    if (!own || !el.getClientRects().length) return;
    var st = getComputedStyle(el);
    if (st.visibility === "hidden" || st.display === "none") return;
    var fg = rgb(st.color), bg = under(el);
    var f = [0, 1, 2].map(function (k) { return fg[k] * fg[3] + bg[k] * (1 - fg[3]); });
    var l1 = lum(f), l2 = lum(bg);
    found.push({tag: el.tagName, id: el.id, cls: String(el.className),
                inK3: !!el.closest(".k3"), text: el.textContent.trim().slice(0, 60),
                color: st.color, background: "rgb(" + bg.map(Math.round).join(", ") + ")",
                ratio: Math.round((Math.max(l1, l2) + 0.05) / (Math.min(l1, l2) + 0.05) * 100) / 100});
  });
  var ship = document.getElementById("k3-ship");
  var pre = document.createElement("pre");
  pre.id = "k3-contrast";
  pre.textContent = JSON.stringify({elements: found, ship_bottom: ship ?
    ship.getBoundingClientRect().bottom + window.scrollY : null, viewport: window.innerHeight});
  document.body.appendChild(pre);
})();
