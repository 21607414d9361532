// Keyboard shortcuts for lists of reviewable rows, toasts, and small htmx glue. No framework.
// Templates carry no inline script or handlers (a strict CSP forbids them): they mark elements
// with data- attributes, and the delegated listeners below give those elements their behaviour.
(function () {
  "use strict";
  const rows = () => Array.from(document.querySelectorAll("[data-row]"));
  const focused = () => document.querySelector("[data-row].focused");
  // Fields that take letters keep them. A checkbox or radio takes none: a clicked one leaves the
  // shortcuts working (Space and Enter stay its own, below).
  const typing = (el) => el && (el.isContentEditable || /^(TEXTAREA|SELECT)$/.test(el.tagName) ||
    (el.tagName === "INPUT" && !/^(checkbox|radio)$/i.test(el.type)));
  // Enter and Space belong to a focused link, button or other control (a nav link, Filter, "Keep
  // both"): the shortcuts never take them for the focused row.
  const CONTROL = "a[href], button, summary, input, select, textarea, label, [role=button], [role=link], [tabindex]:not([tabindex='-1'])";
  const activates = (event) => (event.key === "Enter" || event.key === " ") &&
    event.target instanceof Element && event.target !== document.body && Boolean(event.target.closest(CONTROL));

  // Claims (dashboard/views/claims.py): focusing a row (or opening a proposal's page) claims it,
  // so other reviewers see "<name> is reviewing" and their keyboard skips it. Each page load has
  // its own id: leaving the page releases that page's claim, never a newer one the reviewer made
  // from the next page. A row another reviewer holds, or one drawn open that someone decided
  // since (the poll says so), is "held".
  const PAGE_ID = window.crypto && crypto.randomUUID ? crypto.randomUUID() : String(Math.random()).slice(2);
  const held = (r) => Boolean(r && (r.querySelector("[data-claim=other]") ||
    (r.dataset.open === "1" && r.querySelector("[data-claim=decided]"))));
  let claimed = null;  // what this page holds: {id, release, at}
  let claimTimer = null;
  // The headers every htmx request sends (<body hx-headers>): the CSRF token among them.
  function hxHeaders() {
    try { return JSON.parse(document.body.getAttribute("hx-headers") || "{}"); } catch (e) { return {}; }
  }
  function csrfToken() { return hxHeaders()["X-CSRFToken"] || ""; }
  function releaseClaim() {
    if (!claimed || !window.htmx) return;
    htmx.ajax("POST", claimed.release, { source: document.body, swap: "none", values: { page: PAGE_ID } });
    claimed = null;
  }
  // The row's marker comes back as it is now; when someone else holds it, a keyboard (or
  // automatic) focus moves on to the next open row, unless the reviewer already started on it
  // (a box open or focused in it): then it stays, and what they typed is never lost.
  function sendClaim(el, advance) {
    const marker = el.querySelector("[data-claim]");
    if (!window.htmx || !marker || !el.isConnected) return;
    claimed = { id: el.id, release: el.dataset.releaseUrl, at: Date.now() };
    htmx.ajax("POST", el.dataset.claimUrl, { source: el, target: marker, swap: "outerHTML", values: { page: PAGE_ID } }).then(() => {
      const now = document.getElementById(el.id);
      if (!held(now)) return;
      if (claimed && claimed.id === el.id) claimed = null;
      const started = now.contains(document.activeElement) || now.querySelector("[data-reveal]:not([hidden])");
      if (advance && !started && now.classList.contains("focused")) focusRow(nextOpen(now) || now);
    });
  }
  function scheduleClaim(row, advance) {
    clearTimeout(claimTimer);
    if (!row) return;
    if (!row.dataset.claimUrl || held(row)) {
      if (claimed && claimed.id === row.id) claimed = null;  // decided here: the claim ended with it
      else releaseClaim();  // moved to a row nobody can claim: let the last one go
      return;
    }
    if (claimed && claimed.id === row.id && Date.now() - claimed.at < 30000) return;
    // A short pause: holding j down claims the row it stops on, not every row it passes.
    claimTimer = setTimeout(() => { if (row.classList.contains("focused")) sendClaim(row, advance); }, 150);
  }

  // scroll=false on page load: the page keeps showing its title and filters (phones especially).
  // advance=false for a click: a row someone else holds stays focused (its Take over is there).
  function focusRow(row, scroll = true, advance = true) {
    rows().forEach((r) => r.classList.remove("focused"));
    if (!row) return;
    row.classList.add("focused");
    if (scroll) row.scrollIntoView({ block: "nearest" });
    scheduleClaim(row, advance);
  }
  const open = (r) => r.dataset.open === "1" && !held(r);
  const firstOpen = () => rows().find(open) || null;
  // The keyboard's "n", and "j" on the last row: follow the page's next link ([data-next-page]).
  function nextPage() {
    const link = document.querySelector("[data-next-page]");
    if (link) link.click();
    return Boolean(link);
  }
  // The review queue's last page has <p data-queue-end="url">: "j" past the last row and "n" ask
  // the server what arrived since the reviewer opened the first page, and it says so there (and
  // in a toast). queueSince is when this walk through the queue began (data-since of page 1).
  let queueSince = null;
  function noteSince(list) {
    if (list && list.dataset.since && (list.dataset.firstPage !== undefined || !queueSince)) queueSince = list.dataset.since;
  }
  function queueEnd() {
    const end = document.querySelector("[data-queue-end]");
    if (!end || !window.htmx) return false;
    const since = queueSince ? "&since=" + encodeURIComponent(queueSince) : "";
    htmx.ajax("GET", end.dataset.queueEnd + since, { target: end, swap: "innerHTML" });
    return true;
  }
  // j / k skip rows decided on this page and rows someone else is reviewing; "j" past the last
  // row loads the next page.
  function move(step) {
    const all = rows().filter((r) => (!r.classList.contains("decided") && !held(r)) || r === focused());
    if (!all.length) return;
    const index = all.indexOf(focused());
    if (step > 0 && index === all.length - 1 && (nextPage() || queueEnd())) return;
    focusRow(all[Math.max(0, Math.min(all.length - 1, index < 0 ? 0 : index + step))]);
  }
  // The next open row after this one; never back to rows above that the reviewer passed over.
  function nextOpen(after) {
    const all = rows();
    return all.slice(all.indexOf(after) + 1).find(open) || null;
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
      button.textContent = "Undo";
      button.dataset.undo = "";  // the keyboard's "u" clicks it
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
    toast.dataset.delay = undoUrl ? 8000 : 3500;
    hideToastLater(toast);
  };
  // The toast goes after its delay, but never while the pointer or the focus is on it (reading
  // it, reaching for Undo): it waits until both have left, then its delay starts again.
  function hideToastLater(toast) {
    clearTimeout(window.__toastTimer);
    if (!toast.dataset.delay || toast.matches(":hover, :focus-within")) return;
    window.__toastTimer = setTimeout(() => { toast.hidden = true; }, Number(toast.dataset.delay));
  }
  // A table or a raw reply wider (or taller) than its box scrolls inside it: then it takes the
  // keyboard's focus, so the arrow keys scroll it (axe: scrollable-region-focusable); when it
  // fits, it does not, since a Tab stop that scrolls nothing is one too many. Checked at load,
  // after each swap, when a <details> opens and when the window's width changes.
  const SCROLL_BOXES = ".page table:not(.queue, .triples, .jobs), pre.raw";
  function markScrollBoxes() {
    document.querySelectorAll(SCROLL_BOXES).forEach((box) => {
      const scrolls = box.scrollWidth > box.clientWidth + 1 || box.scrollHeight > box.clientHeight + 1;
      if (scrolls) box.tabIndex = 0;
      else if (box !== document.activeElement) box.removeAttribute("tabindex");
    });
  }
  let scrollBoxTimer = null;
  const markScrollBoxesSoon = () => {
    clearTimeout(scrollBoxTimer);
    scrollBoxTimer = setTimeout(markScrollBoxes, 100);
  };
  document.addEventListener("DOMContentLoaded", markScrollBoxes);
  document.addEventListener("htmx:afterSettle", markScrollBoxesSoon);
  document.addEventListener("toggle", markScrollBoxesSoon, true);
  window.addEventListener("resize", markScrollBoxesSoon);
  document.addEventListener("DOMContentLoaded", () => {
    const toast = document.getElementById("toast");
    if (!toast) return;
    const hold = () => clearTimeout(window.__toastTimer);
    const release = () => setTimeout(() => hideToastLater(toast), 0);  // after :hover / focus move
    toast.addEventListener("mouseenter", hold);
    toast.addEventListener("focusin", hold);
    toast.addEventListener("mouseleave", release);
    toast.addEventListener("focusout", release);
  });

  // A box drawn open to type in ("Merge: edit the text first") takes the focus into its text:
  // left on the <summary>, the next letters were shortcuts ("a" approved the card as proposed).
  document.addEventListener("toggle", (event) => {
    const box = event.target;
    if (!(box instanceof HTMLDetailsElement) || !box.open) return;
    const field = box.querySelector("textarea, input:not([type=hidden]):not([type=checkbox]):not([type=radio])");
    if (!field || !box.contains(document.activeElement)) return;
    field.focus();
    if (field.setSelectionRange) field.setSelectionRange(field.value.length, field.value.length);
  }, true);

  let pendingG = false;
  let pendingGTimer = null;
  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape") {
      const row = focused();
      if (row) row.querySelectorAll("[data-reveal]").forEach((box) => { box.hidden = true; });
      if (typing(document.activeElement)) document.activeElement.blur();
      return;
    }
    // An open dialog (the "?" help) is what the reviewer sees: nothing behind it acts.
    if (document.querySelector("dialog[open]")) return;
    // Enter on a checkbox or radio submits its form in Chromium: a bulk preview from a row's
    // tick, an approval from "pinned: apply anyway". It submits nothing here.
    if (event.key === "Enter" && event.target instanceof Element && event.target.matches("input[type=checkbox], input[type=radio]")) {
      event.preventDefault();
      return;
    }
    if (typing(event.target) || activates(event) || event.metaKey || event.ctrlKey || event.altKey) return;
    // A held key repeats about 30 times a second: only j / k move on with it. A decision (or a
    // toggle) is one press each, never every row the focus then reaches.
    if (event.repeat && event.key !== "j" && event.key !== "k") { event.preventDefault(); return; }
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
      case "n": if (!nextPage() && !queueEnd()) return; break;
      case "d": if (!click(document, "[data-density-toggle]")) return; break;  // compact rows
      case "u": {  // undo the last decision while its toast (and its Undo button) shows
        const undo = document.querySelector("#toast:not([hidden]) [data-undo]:not([disabled])");
        if (!undo) return;
        undo.click();
        break;
      }
      case "/": { const box = document.querySelector("[data-search]"); if (box) box.focus(); break; }
      case "?": { const help = document.getElementById("shortcuts"); if (help) help.showModal(); break; }
      case "g":  // the next key within 1.2 s of the last "g" goes somewhere
        pendingG = true;
        clearTimeout(pendingGTimer);
        pendingGTimer = setTimeout(() => { pendingG = false; }, 1200);
        break;
      default: return;
    }
    event.preventDefault();
  });
  document.addEventListener("click", (event) => {
    const row = event.target.closest("[data-row]");
    if (row) focusRow(row, true, false);
    if (event.target.closest("[data-shortcuts-help]")) document.getElementById("shortcuts").showModal();
    // <button data-reveal-button="edit">: show the row's hidden [data-reveal=edit] form, focus its field.
    const revealer = event.target.closest("[data-reveal-button]");
    if (revealer) reveal(revealer.closest("[data-row]"), "[data-reveal=" + revealer.dataset.revealButton + "]");
    // <button data-copy="#kept-<id>">: copy that box's text (an edit the server refused to save).
    const copier = event.target.closest("[data-copy]");
    if (copier) {
      const box = document.querySelector(copier.dataset.copy);
      if (box) {
        box.focus();
        box.select();
        const done = () => window.showToast("Copied your text.");
        if (navigator.clipboard) navigator.clipboard.writeText(box.value).then(done, () => document.execCommand("copy"));
        else if (document.execCommand("copy")) done();
      }
    }
    // <button data-empty="#bulk-panel">: clear that element (closes a panel htmx filled).
    const emptier = event.target.closest("[data-empty]");
    if (emptier) { const box = document.querySelector(emptier.dataset.empty); if (box) box.replaceChildren(); }
  });
  // <textarea data-enter-submits>: Enter submits its form, Shift+Enter starts a new line.
  document.addEventListener("keydown", (event) => {
    const box = event.target;
    if (event.key !== "Enter" || event.shiftKey || !box.matches || !box.matches("textarea[data-enter-submits]")) return;
    event.preventDefault();
    // Enter is the form's visible submit button: not when that button is disabled (the brake).
    const submit = box.form && box.form.querySelector("button[type=submit]:not([hidden])");
    if (box.form && !(submit && submit.disabled)) box.form.requestSubmit();
  });
  // A form with data-offline-model / data-http-model (second opinion): choosing a provider puts its
  // default model in the form's model box, unless someone typed another model for an HTTP provider.
  document.addEventListener("change", (event) => {
    const select = event.target;
    const form = select.form;
    if (select.name !== "provider" || !form || form.dataset.offlineModel === undefined) return;
    const model = form.elements.model;
    if (!model) return;
    const offline = form.dataset.offlineModel;
    if (select.value === "offline") model.value = offline;
    else if (!model.value || model.value === offline) model.value = form.dataset.httpModel;
  });

  // A field's error sent out of band (<p class="field-error" id="<input id>_error">: the settings
  // preview redraws only itself, never the input the admin is typing in) also marks its input,
  // as a page drawn by the server does: aria-invalid, and named by aria-describedby, while the
  // message says something.
  document.addEventListener("htmx:oobAfterSwap", (event) => {
    const error = event.target; // the element swapped in (detail.target: the one it replaced)
    if (!error || !error.matches || !error.matches(".field-error[id$='_error']")) return;
    const input = document.getElementById(error.id.slice(0, -"_error".length));
    if (!input) return;
    const named = (input.getAttribute("aria-describedby") || "").split(/\s+/).filter(Boolean);
    if (error.textContent.trim()) {
      input.setAttribute("aria-invalid", "true");
      if (!named.includes(error.id)) input.setAttribute("aria-describedby", [...named, error.id].join(" "));
    } else {
      input.removeAttribute("aria-invalid");
    }
  });

  // After a decision swaps a row, keep the reviewer moving: focus the next open row.
  document.addEventListener("htmx:beforeSwap", (event) => {
    const target = event.detail.target;
    if (!event.detail.shouldSwap || !target || !target.matches) return;
    const elt = event.detail.requestConfig && event.detail.requestConfig.elt;
    // The toast's Undo brings its row back open: the reviewer continues from that row.
    // Remember which request swapped it: another request (the banner that refreshes on every
    // decision) may settle first, and htmx restores this row's classes only when its own settles.
    if (elt && elt.matches && elt.matches("[data-undo]") && target.matches("[data-row]")) window.__refocus = target.id;
    else if (target.matches("[data-row].focused")) window.__advanceFrom = target.id;
    else return;
    window.__focusXhr = event.detail.xhr;
  });
  // A list that refreshes itself (<div data-refreshing-list>: the jobs list every few seconds)
  // keeps the keyboard's place: the row focused before the swap is focused again after it, if it
  // is still there, without scrolling. Before, each refresh dropped it and "j" began again.
  let refreshedFrom = null;
  document.addEventListener("htmx:beforeSwap", (event) => {
    const target = event.detail.target;
    const row = focused();
    refreshedFrom = target && target.matches && target.matches("[data-refreshing-list]") && row && target.contains(row) ? row.id : null;
  });
  document.addEventListener("htmx:afterSettle", () => {
    if (!refreshedFrom) return;
    const row = document.getElementById(refreshedFrom);
    refreshedFrom = null;
    if (row && !row.classList.contains("focused")) focusRow(row, false);
  });
  // An action that redraws a whole area (<div data-keep-typed>: a memory's page) keeps what was
  // typed in its other boxes: a QA pass typed an edit, pinned the memory, and the edit was gone.
  // A box comes back as typed only when the page draws it as before: in a form that does the
  // same thing (a Pin reason never lands in the Unpin form someone's pin made of it), from the
  // same text (an edit's draft), and the server put nothing of its own in it.
  // By request: another swap of the area (a poll, a second click) may come between one
  // request's swap and its settle, and must not take its typed boxes with it.
  const typedBefore = new WeakMap();
  const doing = (box) => {
    const action = box.form && box.form.querySelector("input[name=action]");
    return action ? action.value : "";
  };
  document.addEventListener("htmx:beforeSwap", (event) => {
    const target = event.detail.target;
    if (!event.detail.shouldSwap || !target || !target.matches || !target.matches("[data-keep-typed]")) return;
    const elt = event.detail.requestConfig && event.detail.requestConfig.elt;
    const sent = elt && elt.closest ? elt.closest("form") : null;
    const boxes = Array.from(target.querySelectorAll("textarea[id], input[id]"))
      .filter((box) => box.type !== "hidden" && box.type !== "checkbox" && box.type !== "radio")
      .filter((box) => box.value !== box.defaultValue && !(sent && sent.contains(box)))
      .map((box) => ({ id: box.id, value: box.value, from: box.defaultValue, does: doing(box) }));
    if (event.detail.xhr) typedBefore.set(event.detail.xhr, boxes);
  });
  document.addEventListener("htmx:afterSettle", (event) => {
    const typed = event.detail.xhr && typedBefore.get(event.detail.xhr);
    if (!typed) return;  // another swap (the banner)
    typedBefore.delete(event.detail.xhr);
    typed.forEach((was) => {
      const box = document.getElementById(was.id);
      if (!box || box.defaultValue !== was.from || box.value !== box.defaultValue) return;
      if (doing(box) !== was.does) return;
      box.value = was.value;
      const details = box.closest("details");
      if (details) details.open = true;
    });
  });
  // The emergency brake changed while the page is open (the banner's refresh says so): hold or
  // free every apply button, and say why rows wait, as a page drawn now would. A QA pass saw
  // every Approve stay disabled after the brake was lifted, until a reload. Only a change acts:
  // the refresh comes every 30 s, and a button htmx disabled for its own request stays so.
  const bannerNow = document.getElementById("mode-banner");
  let brakeShown = bannerNow ? bannerNow.dataset.brake : null;
  document.addEventListener("htmx:load", (event) => {
    const banner = event.detail.elt;
    if (!banner || banner.id !== "mode-banner" || banner.dataset.brake === brakeShown) return;
    brakeShown = banner.dataset.brake;
    const on = brakeShown === "on";
    document.querySelectorAll("[data-brake-held]").forEach((button) => {
      button.disabled = on;
      const title = on ? button.dataset.brakeHeld : button.dataset.freeTitle;
      if (title) button.title = title; else button.removeAttribute("title");
    });
    document.querySelectorAll("[data-brake-on]").forEach((note) => {
      note.textContent = on ? note.dataset.brakeOn : note.dataset.brakeOff;
      note.hidden = !note.textContent;
    });
    document.querySelectorAll("[data-brake-note]").forEach((note) => { note.hidden = !on; });
  });
  // A new list of rows (<section data-review-list>: a filter change, another page) swapped in:
  // focus its first open row, so the first "a" decides something; bring the list's top into view
  // when the reviewer had scrolled past it.
  document.addEventListener("htmx:load", (event) => {
    const list = event.detail.elt;
    if (!list || !list.matches || !list.matches("[data-review-list]")) return;
    focusRow(firstOpen(), false);
    noteSince(list);
    if (list.getBoundingClientRect().top < 0) list.scrollIntoView({ block: "start" });
  });
  // After settling: htmx settles a swapped element's class last, which would drop "focused".
  document.addEventListener("htmx:afterSettle", (event) => {
    if (window.__focusXhr && event.detail.xhr !== window.__focusXhr) return;
    window.__focusXhr = null;
    if (window.__refocus) {
      focusRow(document.getElementById(window.__refocus));
      window.__refocus = null;
      return;
    }
    if (!window.__advanceFrom) return;
    const swapped = document.getElementById(window.__advanceFrom);
    window.__advanceFrom = null;
    // A refused edit comes back with the typed text (data-keep-focus): stay on it, in the box.
    const kept = swapped && swapped.querySelector("[data-keep-focus]");
    if (kept) {
      focusRow(swapped);
      kept.focus();
      if (!kept.readOnly) kept.setSelectionRange(kept.value.length, kept.value.length);
      return;
    }
    // Refused, or asked first ("Approve anyway?", "pinned: apply anyway"): nothing was decided, so
    // the focus stays where the reviewer reads why; moving on, the next "a" decided another row.
    if (swapped && swapped.dataset.open === "1") {
      focusRow(swapped, true, false);
      return;
    }
    focusRow(nextOpen(swapped) || swapped);
  });
  // The density toggle's answer (dashboard/views/prefs.py, remembered per person): compact queue
  // rows on or off in place, so the focused row and the scroll position stay.
  document.addEventListener("density", (event) => {
    const compact = Boolean(event.detail && event.detail.compact);
    const queue = document.getElementById("queue");
    if (queue) queue.classList.toggle("compact", compact);
    const filters = document.querySelector(".filter-box");
    if (filters) {
      filters.classList.toggle("compact", compact);
      // Folded with compact rows unless a filter is set, as the server draws it on the next visit.
      filters.open = !compact || filters.hasAttribute("data-filtered");
    }
    document.querySelectorAll("[data-density-toggle]").forEach((b) => b.setAttribute("aria-pressed", String(compact)));
    const row = focused();
    if (row) row.scrollIntoView({ block: "nearest" });
    window.showToast(compact ? "Compact rows: one line each; the focused row shows its details." : "Full rows.");
  });
  document.addEventListener("toast", (event) => window.showToast(event.detail.message || event.detail.value, event.detail.undo, event.detail.row));
  // The session ended (dashboard.access.session_ended answers 401 with this event): say so and
  // keep the page as it is, anything typed included; the link signs in and comes back here.
  // Once the session ended, the claims poll stops asking every few seconds (each answer would be
  // one more 401); a return to the tab asks once, and the first answer that succeeds (signed in
  // again in another tab) starts it again and takes the toast away.
  let endedAt = 0;  // when the session ended; 0 while it lasts
  document.addEventListener("session-ended", (event) => {
    endedAt = Date.now();
    const toast = document.getElementById("toast");
    if (!toast) return;
    // Every request after the end answers so (the claims poll every few seconds): a toast that
    // already says it stays as it is, or its link would be replaced under the pointer and a
    // click pressed on the old one and let go on the new one would go nowhere.
    const shown = toast.querySelector("[data-testid=sign-in-again]");
    if (!toast.hidden && shown && shown.getAttribute("href") === event.detail.login) return;
    clearTimeout(window.__toastTimer);
    delete toast.dataset.delay;  // stays until the reviewer signs in
    toast.textContent = event.detail.message;
    const link = document.createElement("a");
    link.className = "linklike";
    link.href = event.detail.login;
    link.textContent = "Sign in";
    link.dataset.testid = "sign-in-again";
    toast.appendChild(link);
    toast.hidden = false;
  });
  // A request sent before the end may still succeed after it: only a later one says the session
  // is back.
  document.addEventListener("htmx:beforeRequest", (event) => { event.detail.xhr.sentAt = Date.now(); });
  document.addEventListener("htmx:afterRequest", (event) => {
    if (!endedAt || !event.detail.successful || !(event.detail.xhr.sentAt >= endedAt)) return;
    endedAt = 0;
    renewCsrfToken();
    const toast = document.getElementById("toast");
    if (toast && toast.querySelector("[data-testid=sign-in-again]")) toast.hidden = true;
  });
  // Signing in again gave the session a new CSRF secret (Django rotates it at login): the page
  // takes it from the cookie, or its next decision would be refused (403).
  function renewCsrfToken() {
    const match = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
    if (!match) return;
    const token = decodeURIComponent(match[1]);
    const headers = hxHeaders();
    headers["X-CSRFToken"] = token;
    document.body.setAttribute("hx-headers", JSON.stringify(headers));
    document.querySelectorAll("input[name=csrfmiddlewaretoken]").forEach((input) => { input.value = token; });
  }
  // Back and Forward restore a page htmx kept as HTML, where a field shows the value it was drawn
  // with, not the one typed: a filter form whose changes push the URL is set from the URL again,
  // so the fields say what the results are (a QA pass: the next change dropped the search).
  document.addEventListener("htmx:historyRestore", () => {
    const params = new URLSearchParams(window.location.search);
    document.querySelectorAll("form[hx-push-url=true]").forEach((form) => {
      for (const field of form.elements) {
        if (!field.name || field.type === "hidden" || field.type === "submit") continue;
        const values = params.getAll(field.name);
        if (field.type === "checkbox" || field.type === "radio") {
          field.checked = values.includes(field.value || "on");
        } else if (field.tagName === "SELECT" && field.multiple) {
          for (const option of field.options) option.selected = values.includes(option.value);
        } else if (field.tagName === "SELECT" && !values.length) {
          const blank = Array.from(field.options).findIndex((option) => option.value === "");
          field.selectedIndex = Math.max(blank, 0);  // the filter's "any", else its first choice
        } else {
          field.value = values.length ? values[0] : "";
        }
      }
    });
  });
  document.addEventListener("htmx:responseError", (event) => {
    if (event.detail.xhr.status === 401) return;  // the session-ended event said it
    window.showToast("Request failed (" + event.detail.xhr.status + "). Reload the page and try again.");
  });
  // "Take over" (a button in another reviewer's claim marker) claims for this page too.
  document.addEventListener("htmx:configRequest", (event) => {
    const elt = event.detail.elt;
    if (!elt || !elt.matches || !elt.matches("[data-claim-takeover]")) return;
    event.detail.parameters.page = PAGE_ID;
    const owner = elt.closest("[data-claim-url]");
    if (owner) claimed = { id: owner.id, release: owner.dataset.releaseUrl, at: Date.now() };
  });
  // A queue asks who is reviewing its rows every few seconds while its tab is visible
  // (<div data-claims-poll data-poll-seconds hx-trigger="claims-poll">), and at once on return.
  let lastPoll = Date.now();
  function pollClaims(force) {
    const poll = document.querySelector("[data-claims-poll]");
    if (!poll || !window.htmx || document.visibilityState !== "visible") return;
    if (endedAt && !force) return;
    if (!force && Date.now() - lastPoll < 1000 * Number(poll.dataset.pollSeconds || 5)) return;
    lastPoll = Date.now();
    htmx.trigger(poll, "claims-poll");
  }
  setInterval(() => pollClaims(false), 1000);
  document.addEventListener("visibilitychange", () => pollClaims(true));
  // Leaving the page lets go of its claim; a page restored from the back-forward cache claims again.
  window.addEventListener("pagehide", () => {
    if (!claimed || !navigator.sendBeacon) return;
    const data = new FormData();
    data.append("page", PAGE_ID);
    data.append("csrfmiddlewaretoken", csrfToken());
    navigator.sendBeacon(claimed.release, data);
  });
  window.addEventListener("pageshow", (event) => {
    if (!event.persisted) return;
    claimed = null;
    const row = focused();
    if (row) scheduleClaim(row, false);
    const page = document.querySelector("[data-claim-on-load]");
    if (page) sendClaim(page, false);
  });
  document.addEventListener("DOMContentLoaded", () => {
    // A proposal's page claims it when opened (<section data-claim-on-load data-claim-url>).
    const page = document.querySelector("[data-claim-on-load]");
    if (page && page.dataset.claimUrl) sendClaim(page, false);
    // <details data-fold-on-phone open>: folded on a narrow screen, so the list shows first.
    if (window.matchMedia("(max-width: 640px)").matches) {
      document.querySelectorAll("details[data-fold-on-phone]").forEach((box) => { box.open = false; });
    }
    if (!focused()) focusRow(firstOpen(), false);
    noteSince(document.querySelector("[data-review-list]"));
  });
})();
