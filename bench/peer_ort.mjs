// ONNX Runtime as its Node.js users run it (npm onnxruntime-node, CPU
// execution provider, all graph optimizations), on the benchmark's model.onnx
// (exported by bench/make_inputs.py from the same checkpoint) and token ids.
//
//   node bench/peer_ort.mjs --inputs DIR --mode padded|per-sequence --threads 2 \
//       --workloads W1,W2 --min-seconds 3 --outputs OUT_DIR
//
// padded: the workload as one batch padded to its longest sequence.
// per-sequence: each sequence alone (batch 1, no padding), one after another.
// Prints one JSON line per workload (median and every timed run, in ms) and
// writes the valid rows of each output, float32, to OUT_DIR/<workload>.f32.
import fs from 'node:fs';
import path from 'node:path';
import ort from 'onnxruntime-node';

function parseArgs(argv) {
  const a = {mode: 'padded', threads: 2, workloads: 'W1,W2', minSeconds: 3, minRuns: 3};
  for (let i = 2; i < argv.length; i += 2) {
    const key = argv[i].replace(/^--/, '').replace(/-(.)/g, (_, c) => c.toUpperCase());
    if (!(key in a) && !['inputs', 'outputs'].includes(key)) throw new Error(`unknown flag ${argv[i]}`);
    a[key] = typeof a[key] === 'number' ? Number(argv[i + 1]) : argv[i + 1];
  }
  if (!a.inputs) throw new Error('--inputs DIR is required');
  if (!['padded', 'per-sequence'].includes(a.mode)) throw new Error(`unknown mode ${a.mode}`);
  return a;
}

function feeds(sequences) {
  const longest = Math.max(...sequences.map((s) => s.length));
  const ids = new BigInt64Array(sequences.length * longest);
  const mask = new BigInt64Array(sequences.length * longest);
  sequences.forEach((s, b) => s.forEach((id, t) => {
    ids[b * longest + t] = BigInt(id);
    mask[b * longest + t] = 1n;
  }));
  const dims = [sequences.length, longest];
  return {input_ids: new ort.Tensor('int64', ids, dims), attention_mask: new ort.Tensor('int64', mask, dims)};
}

// The valid rows of a [batch, longest, hidden] output, sequence after sequence.
function validRows(output, sequences) {
  const [, longest, hidden] = output.dims;
  const rows = [];
  sequences.forEach((s, b) => rows.push(output.data.subarray(b * longest * hidden, (b * longest + s.length) * hidden)));
  return rows;
}

// The middle value, or the mean of the two middle ones (as Python's
// statistics.median and encoderd bench take it).
const median = (xs) => {
  const s = [...xs].sort((x, y) => x - y), n = s.length;
  return n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
};

const a = parseArgs(process.argv);
const session = await ort.InferenceSession.create(path.join(a.inputs, 'model.onnx'), {
  executionProviders: ['cpu'],
  graphOptimizationLevel: 'all',
  executionMode: 'sequential',
  intraOpNumThreads: a.threads,
  interOpNumThreads: 1,
});
const workloads = JSON.parse(fs.readFileSync(path.join(a.inputs, 'workloads.json'), 'utf8'));
for (const name of a.workloads.split(',')) {
  const sequences = workloads[name];
  const batches = a.mode === 'padded' ? [sequences] : sequences.map((s) => [s]);
  const inputs = batches.map(feeds);
  const run = async () => {
    const rows = [];
    for (let i = 0; i < batches.length; ++i) {
      const out = await session.run(inputs[i]);
      rows.push(...validRows(out.last_hidden_state, batches[i]));
    }
    return rows;
  };
  let rows = await run();  // warm-up
  const times = [];
  const start = performance.now();
  while (times.length < a.minRuns || performance.now() - start < a.minSeconds * 1000) {
    const t0 = performance.now();
    rows = await run();
    times.push(performance.now() - t0);
  }
  if (a.outputs) {
    fs.mkdirSync(a.outputs, {recursive: true});
    const total = rows.reduce((n, r) => n + r.length, 0);
    const packed = new Float32Array(total);
    let offset = 0;
    for (const r of rows) { packed.set(r, offset); offset += r.length; }
    fs.writeFileSync(path.join(a.outputs, `${name}.f32`), Buffer.from(packed.buffer));
  }
  const tokens = sequences.reduce((n, s) => n + s.length, 0);
  console.log(JSON.stringify({workload: name, tokens, ms: median(times), runs_ms: times}));
}
console.log(JSON.stringify({onnxruntime: ort.env.versions.common, threads: a.threads}));
