// Keyboard shortcuts for lists of reviewable rows, toasts, and small htmx glue. No framework.
(function () {
  "use strict";
  const rows = () => Array.from(document.querySelectorAll("[data-row]"));
  const focused = () => document.querySelector("[data-row].focused");
  const typing = (el) => el && (el.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(el.tagName));

  function focusRow(row) {
    rows().forEach((r) => r.classList.remove("focused"));
    if (!row) return;
    row.classList.add("focused");
    row.scrollIntoView({ block: "nearest" });
  }
  function move(step) {
    const all = rows();
    if (!all.length) return;
    const index = all.indexOf(focused());
    focusRow(all[Math.max(0, Math.min(all.length - 1, index < 0 ? 0 : index + step))]);
  }
  function nextOpen(after) {
    const all = rows();
    const start = Math.max(0, all.indexOf(after));
    return all.slice(start + 1).find((r) => r.dataset.open === "1") || all.slice(0, start).reverse().find((r) => r.dataset.open === "1") || null;
  }
  function click(row, selector) {
    const el = row && row.querySelector(selector);
    if (el && !el.disabled) { el.click(); return true; }
    return false;
  }
  function reveal(row, selector) {
    const box = row && row.querySelector(selector);
    if (!box) return;
    box.hidden = false;
    const input = box.querySelector("textarea, input[type=text], input:not([type])");
    if (input) { input.focus(); input.select && input.select(); }
  }
  window.showToast = function (message, undoUrl, rowId) {
    const toast = document.getElementById("toast");
    if (!toast) return;
    toast.textContent = message;
    if (undoUrl) {
      const button = document.createElement("button");
      button.className = "linklike";
      button.style.color = "#93c5fd";
      button.style.marginLeft = "1rem";
      button.textContent = "Undo";
      button.setAttribute("hx-post", undoUrl);
      button.setAttribute("hx-disabled-elt", "this");
      // Re-render the decided row when it is still on the page; otherwise only the toast changes.
      const row = rowId && document.getElementById(rowId);
      if (row) {
        button.setAttribute("hx-target", "#" + rowId);
        button.setAttribute("hx-swap", "outerHTML");
      } else {
        button.setAttribute("hx-swap", "none");
      }
      toast.appendChild(button);
      if (window.htmx) htmx.process(button);
    }
    toast.hidden = false;
    clearTimeout(window.__toastTimer);
    window.__toastTimer = setTimeout(() => { toast.hidden = true; }, undoUrl ? 8000 : 3500);
  };

  let pendingG = false;
  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape") {
      const row = focused();
      if (row) row.querySelectorAll("[data-reveal]").forEach((box) => { box.hidden = true; });
      if (typing(document.activeElement)) document.activeElement.blur();
      return;
    }
    if (typing(event.target) || event.metaKey || event.ctrlKey || event.altKey) return;
    const row = focused();
    if (pendingG) {
      pendingG = false;
      const target = { r: "/review/", m: "/memories/", c: "/contradictions/", o: "/", j: "/jobs/" }[event.key];
      if (target) { window.location = target; event.preventDefault(); }
      return;
    }
    switch (event.key) {
      case "j": move(1); break;
      case "k": move(-1); break;
      case "a": if (!click(row, "[data-action=approve]")) return; break;
      case "r": reveal(row, "[data-reveal=reject]"); break;
      case "e": reveal(row, "[data-reveal=edit]"); break;
      case "x": click(row, "input[type=checkbox][data-select]"); break;
      case "o": case "Enter": if (!click(row, "[data-action=open]")) return; break;
      case "/": { const box = document.querySelector("[data-search]"); if (box) box.focus(); break; }
      case "?": { const help = document.getElementById("shortcuts"); if (help) help.showModal(); break; }
      case "g": pendingG = true; setTimeout(() => { pendingG = false; }, 1200); break;
      default: return;
    }
    event.preventDefault();
  });
  document.addEventListener("click", (event) => {
    const row = event.target.closest("[data-row]");
    if (row) focusRow(row);
    if (event.target.closest("[data-shortcuts-help]")) document.getElementById("shortcuts").showModal();
  });

  // After a decision swaps a row, keep the reviewer moving: focus the next open row.
  document.addEventListener("htmx:beforeSwap", (event) => {
    const target = event.detail.target;
    if (target && target.matches && target.matches("[data-row].focused")) window.__advanceFrom = target.id;
  });
  document.addEventListener("htmx:afterSwap", () => {
    if (!window.__advanceFrom) return;
    const swapped = document.getElementById(window.__advanceFrom);
    window.__advanceFrom = null;
    focusRow(nextOpen(swapped) || swapped);
  });
  document.addEventListener("toast", (event) => window.showToast(event.detail.message || event.detail.value, event.detail.undo, event.detail.row));
  document.addEventListener("htmx:responseError", (event) => {
    window.showToast("Request failed (" + event.detail.xhr.status + "). Reload the page and try again.");
  });
  document.addEventListener("DOMContentLoaded", () => {
    const first = rows().find((r) => r.dataset.open === "1");
    if (first) focusRow(first);
  });
})();
