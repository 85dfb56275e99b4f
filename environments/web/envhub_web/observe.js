// The browser twin of envhub_web/pageview.py: the page as text lines, one per control
// ("[bid] role "name" value=...") or text node. Keep both files in step; the test
// suite compares them on every MiniShop page type.
(options) => {
  const LEAF = new Set(["link", "button", "textbox", "combobox", "checkbox", "radio", "heading"]);
  const SKIP = new Set(["SCRIPT", "STYLE", "NOSCRIPT", "TEMPLATE", "HEAD"]);
  const norm = (s) => (s || "").replace(/\s+/g, " ").trim();
  const quote = (s) => JSON.stringify(s);
  if (options.tagAll) {
    let next = window.__envhubNextBid || 1;
    for (const el of document.body.querySelectorAll("*")) {
      if (!el.hasAttribute("data-bid")) el.setAttribute("data-bid", String(next++));
    }
    window.__envhubNextBid = next;
  }
  const hidden = (el) => {
    if (el.hidden || (el.tagName === "INPUT" && el.type === "hidden")) return true;
    const style = getComputedStyle(el);
    return style.display === "none" || style.visibility === "hidden";
  };
  const role = (el) => {
    const explicit = (el.getAttribute("role") || "").trim();
    if (LEAF.has(explicit)) return explicit;
    const tag = el.tagName;
    if (tag === "A" && el.hasAttribute("href")) return "link";
    if (tag === "BUTTON") return "button";
    if (tag === "SELECT") return "combobox";
    if (tag === "TEXTAREA") return "textbox";
    if (/^H[1-6]$/.test(tag)) return "heading";
    if (tag === "INPUT") {
      const type = (el.getAttribute("type") || "text").toLowerCase();
      if (["submit", "button", "reset"].includes(type)) return "button";
      if (type === "checkbox" || type === "radio") return type;
      return "textbox";
    }
    return "";
  };
  const name = (el, r) => {
    const label = norm(el.getAttribute("aria-label"));
    if (label) return label;
    if (el.tagName === "INPUT") {
      if (r === "button") return norm(el.value);
      return norm(el.getAttribute("placeholder"));
    }
    if (r === "combobox" || r === "textbox") return "";
    return norm(el.textContent);
  };
  const describe = (el, r, bid) => {
    let line = (bid ? "[" + bid + "] " : "") + r + " " + quote(name(el, r));
    if (r === "textbox") line += " value=" + quote(el.value);
    if (r === "combobox") {
      line += " value=" + quote(el.value) + " options=[" +
        Array.from(el.options).map((o) => quote(o.value)).join(", ") + "]";
    }
    if ((r === "checkbox" || r === "radio") && el.checked) line += " checked";
    if (el.disabled) line += " disabled";
    return line;
  };
  const lines = [];
  const walk = (el) => {
    if (SKIP.has(el.tagName) || hidden(el)) return;
    const bid = el.getAttribute("data-bid");
    const r = role(el);
    if (r) {
      lines.push(describe(el, r, bid));
      return;
    }
    for (const child of el.childNodes) {
      if (child.nodeType === Node.TEXT_NODE) {
        const text = norm(child.nodeValue);
        if (text) lines.push((bid ? "[" + bid + "] " : "") + text);
      } else if (child.nodeType === Node.ELEMENT_NODE) {
        walk(child);
      }
    }
  };
  if (document.body) walk(document.body);
  return {title: norm(document.title), lines: lines};
}
