// A code span in a table's first column (a command's usage, a function's signature) wraps only
// between its words, an option in brackets counted as one word: "[--port P]" stays whole instead
// of breaking after its hyphens or before its value. Each word is put in a span that does not
// wrap; the text (what a copy gives) is unchanged. tables.css lets the first column's code wrap;
// tests/test_docs.py checks in headless Chromium that every table fits its page.
function words(text) {
  const out = [];
  let word = "";
  let depth = 0;
  for (const ch of text) {
    if (/\s/.test(ch) && depth === 0) {
      if (word) out.push(word);
      out.push(ch);
      word = "";
      continue;
    }
    if (ch === "[") depth += 1;
    if (ch === "]" && depth > 0) depth -= 1;
    word += ch;
  }
  if (word) out.push(word);
  return out;
}

document
  .querySelectorAll(".md-typeset table:not([class]) td:first-child code")
  .forEach((code) => {
    if (code.children.length || !/\s/.test(code.textContent.trim())) return;
    const parts = words(code.textContent);
    code.textContent = "";
    for (const part of parts) {
      if (/^\s$/.test(part)) {
        code.append(part);
      } else {
        const word = document.createElement("span");
        word.style.whiteSpace = "nowrap";
        word.textContent = part;
        code.append(word);
      }
    }
  });
