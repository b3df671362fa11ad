// Classifies texts with JavaScript language detectors from npm, for
// training/langid/evaluate.py --peers.
//
//   node detect.mjs LABELS IN.jsonl OUT.json
//
// LABELS: the model's labels, comma-separated ISO 639-1 codes (en,de,...).
// IN.jsonl: one {"text": ...} per line. OUT.json: {"detector": [label per
// text]}, where a label outside LABELS (or "" for no answer) counts as a miss.
// Detectors: eld (large database) and tinyld (normal) over all the languages
// they know, as they run by default, and restricted to LABELS; franc
// restricted to LABELS (over its 187 languages it is not a fair comparison
// on short texts) with minLength 1 so that it answers every text.
import { readFileSync, writeFileSync } from "node:fs";
import { eld } from "eld/large";
import { detect as tinyld } from "tinyld";
import { franc } from "franc";

const [labelsArg, inPath, outPath] = process.argv.slice(2);
if (!outPath) {
  console.error("usage: node detect.mjs LABELS IN.jsonl OUT.json");
  process.exit(2);
}
const labels = labelsArg.split(",");
const texts = readFileSync(inPath, "utf8")
  .split("\n")
  .filter((line) => line.trim())
  .map((line) => JSON.parse(line).text);

// franc speaks ISO 639-3; Chinese is Mandarin ("cmn").
const ISO3 = {
  en: "eng", de: "deu", fr: "fra", es: "spa", it: "ita", pt: "por", nl: "nld",
  pl: "pol", ru: "rus", uk: "ukr", cs: "ces", sv: "swe", tr: "tur", ja: "jpn",
  zh: "cmn", ko: "kor",
};
const fromIso3 = Object.fromEntries(labels.map((l) => [ISO3[l], l]));
for (const l of labels) {
  if (!ISO3[l]) throw new Error(`no ISO 639-3 code for label ${l}`);
}

const eldAll = eld.newInstance();
const eldSub = eld.newInstance();
eldSub.setLanguageSubset(labels);

const detectors = {
  "eld": (t) => eldAll.detect(t).language,
  "eld (16 languages)": (t) => eldSub.detect(t).language,
  "tinyld": (t) => tinyld(t),
  "tinyld (16 languages)": (t) => tinyld(t, { only: labels }),
  "franc (16 languages)": (t) =>
    fromIso3[franc(t, { only: Object.values(ISO3), minLength: 1 })] ?? "",
};
const out = {};
for (const [name, fn] of Object.entries(detectors)) {
  out[name] = texts.map((t) => fn(t) || "");
}
writeFileSync(outPath, JSON.stringify(out));
