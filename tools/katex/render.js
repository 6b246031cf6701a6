// Render formulas with KaTeX, as a notebook or page viewer would, and report each that fails.
// stdin: a JSON list of {"tex": "...", "display": true|false, "where": "..."};
// stdout: a JSON list of {"where": "...", "tex": "...", "error": "..."}, empty when all render.
// Used by tests/test_notebook_gates.py; `npm ci --prefix tools/katex` installs KaTeX.
"use strict";
const katex = require("katex");

let input = "";
process.stdin.setEncoding("utf8");
process.stdin.on("data", (chunk) => { input += chunk; });
process.stdin.on("end", () => {
  const failures = [];
  for (const formula of JSON.parse(input)) {
    try {
      // strict "ignore": KaTeX's LaTeX-compatibility warnings are not errors in Jupyter either
      katex.renderToString(formula.tex, {
        displayMode: formula.display, throwOnError: true, strict: "ignore",
      });
    } catch (error) {
      failures.push({ where: formula.where, tex: formula.tex, error: String(error.message) });
    }
  }
  process.stdout.write(JSON.stringify(failures));
});
