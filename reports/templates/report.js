// Graph zoom (buttons, ctrl+wheel) and drag-to-pan for the mpdoctor report; the report is complete without it.
(function () {
  document.documentElement.classList.add("js");
  document.querySelectorAll(".graph").forEach(function (graph) {
    var canvas = graph.querySelector(".graph-canvas"), svg = canvas && canvas.querySelector("svg");
    if (!svg) { return; }
    var width = svg.width.baseVal.value, height = svg.height.baseVal.value, scale = 1;
    function zoom(factor) {
      scale = Math.min(4, Math.max(0.05, scale * factor));
      svg.setAttribute("width", String(width * scale));
      svg.setAttribute("height", String(height * scale));
      graph.setAttribute("data-scale", scale.toFixed(3));
    }
    graph.querySelector(".zoom-in").addEventListener("click", function () { zoom(1.25); });
    graph.querySelector(".zoom-out").addEventListener("click", function () { zoom(0.8); });
    graph.querySelector(".zoom-fit").addEventListener("click", function () {
      zoom(Math.min(canvas.clientWidth / width, canvas.clientHeight / height) / scale);
    });
    canvas.addEventListener("wheel", function (event) {
      if (event.ctrlKey) { event.preventDefault(); zoom(event.deltaY < 0 ? 1.1 : 0.9); }
    }, { passive: false });
    var drag = null;
    canvas.addEventListener("mousedown", function (event) {
      drag = { x: event.clientX, y: event.clientY, left: canvas.scrollLeft, top: canvas.scrollTop };
      canvas.classList.add("dragging");
    });
    window.addEventListener("mousemove", function (event) {
      if (!drag) { return; }
      canvas.scrollLeft = drag.left - (event.clientX - drag.x);
      canvas.scrollTop = drag.top - (event.clientY - drag.y);
    });
    window.addEventListener("mouseup", function () { drag = null; canvas.classList.remove("dragging"); });
  });
})();
// In a frame (the Jupyter magic's sandboxed iframe), tell the page the report's height, so it can fit the frame to it.
(function () {
  if (window.parent === window) { return; }
  function post() {  // the page's own height (scrollHeight is at least the frame's); 0 until the frame is laid out
    var height = Math.ceil(document.documentElement.getBoundingClientRect().height);
    if (height > 0) { window.parent.postMessage({ mpdoctorReportHeight: height }, "*"); }
  }
  post();
  window.addEventListener("load", post);
  if (window.ResizeObserver) { new ResizeObserver(post).observe(document.body); }
})();
