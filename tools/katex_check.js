// Render TeX with KaTeX as Colab does; print the spans it refuses.
// Usage: node tools/katex_check.js PATH/TO/katex.js < spans.json
// spans.json is a list of {"tex": "...", "display": true|false}; the output is a JSON list of
// {"index": i, "error": "..."}, one per refused span (empty when KaTeX renders them all).
"use strict";
const katex = require(require("path").resolve(process.argv[2]));
const spans = JSON.parse(require("fs").readFileSync(0, "utf8"));
const refused = [];
spans.forEach((span, index) => {
  try {
    katex.renderToString(span.tex, {
      displayMode: Boolean(span.display),
      throwOnError: true,
      strict: "ignore", // LaTeX-compatibility warnings are not failures
    });
  } catch (err) {
    refused.push({ index, error: String(err.message || err) });
  }
});
process.stdout.write(JSON.stringify(refused));
