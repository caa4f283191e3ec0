// cloudflare.mjs: the description Cloudflare's codemode (@cloudflare/codemode, installed
// by bench/describe/run.sh into build/cf) writes for the tools of a fixture file, the
// text its code tool shows the model: its default description with the TypeScript it
// generates from the JSON Schemas. Its browser entry is used because the main one
// imports cloudflare:workers; the description it builds is the same
// (generateTypesFromJsonSchema into the same DEFAULT_DESCRIPTION).
//   node bench/describe/cloudflare.mjs FIXTURE.json   -> the description on stdout
//   node bench/describe/cloudflare.mjs --o200k FILE... -> o200k token counts, one a line
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";
import path from "node:path";

const root = path.resolve(process.env.CF_DIR || "build/cf");
const require = createRequire(path.join(root, "package.json"));

if (process.argv[2] === "--o200k") {
  const { encode } = await import(pathToFileURL(require.resolve("gpt-tokenizer/encoding/o200k_base")));
  for (const f of process.argv.slice(3)) console.log(encode(readFileSync(f, "utf8")).length);
} else {
  const { createBrowserCodeTool } = await import(pathToFileURL(require.resolve("@cloudflare/codemode/browser")));
  const tools = JSON.parse(readFileSync(process.argv[2], "utf8"));
  const tool = createBrowserCodeTool({ tools, executor: { execute: async () => ({}) } });
  process.stdout.write(tool.description);
}
