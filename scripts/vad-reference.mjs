// vad-reference.mjs: Silero VAD v5 reference probabilities and segments with
// onnxruntime (npm onnxruntime-node), for the silero_vad family's tests and
// benchmark. Run through scripts/vad-reference.sh and scripts/bench-vad.sh.
//
//   node vad-reference.mjs golden ORT_DIR MODEL.onnx PREP_DIR OUT.json CLIP...
//       PREP_DIR holds CLIP.f32 (16 kHz mono float32) + CLIP.json per clip,
//       made by scripts/vad-reference.go; writes the golden JSON.
//   node vad-reference.mjs bench ORT_DIR MODEL.onnx CLIP.f32 [RUNS]
//       prints {"best_ms", "audio_s", "rtf", "chunks"} for one thread.
//
// The model runs the way silero's own OnnxWrapper feeds it: chunks of 512
// samples (the last one zero-padded) preceded by the previous chunk's last 64
// samples (zeros at the start), state [2,1,128] carried across chunks.
import { createRequire } from 'node:module';
import fs from 'node:fs';
import path from 'node:path';

const CHUNK = 512, CONTEXT = 64, RATE = 16000;

async function openModel(ortDir, modelPath) {
  const require = createRequire(path.resolve(ortDir, 'package.json'));
  const ort = require('onnxruntime-node');
  const session = await ort.InferenceSession.create(modelPath, {
    intraOpNumThreads: 1, interOpNumThreads: 1, executionMode: 'sequential',
  });
  return { ort, session };
}

async function probabilities({ ort, session }, samples) {
  const n = Math.ceil(samples.length / CHUNK);
  const probs = new Array(n);
  let state = new Float32Array(2 * 128);
  const window = new Float32Array(CONTEXT + CHUNK);
  const sr = new ort.Tensor('int64', BigInt64Array.from([BigInt(RATE)]), []);
  for (let i = 0; i < n; i++) {
    window.copyWithin(0, CHUNK, CHUNK + CONTEXT); // previous chunk's tail (zeros at first)
    window.fill(0, CONTEXT);
    window.set(samples.subarray(i * CHUNK, Math.min(samples.length, (i + 1) * CHUNK)), CONTEXT);
    const out = await session.run({
      input: new ort.Tensor('float32', window.slice(), [1, CONTEXT + CHUNK]),
      state: new ort.Tensor('float32', state, [2, 1, 128]),
      sr,
    });
    probs[i] = out.output.data[0];
    state = out.stateN.data.slice();
  }
  return probs;
}

const DEFAULTS = {
  threshold: 0.5, neg_threshold: null, min_speech_duration_ms: 250, min_silence_duration_ms: 100,
  speech_pad_ms: 30, max_speech_duration_s: Infinity, min_silence_at_max_speech_ms: 98,
  use_max_poss_sil_at_max_speech: true,
};

// speechTimestamps follows silero's get_speech_timestamps (16 kHz, 512-sample
// windows) and returns [{start, end}] in 16 kHz samples.
function speechTimestamps(probs, length, options) {
  const o = { ...DEFAULTS, ...options };
  const neg = o.neg_threshold === null ? Math.max(o.threshold - 0.15, 0.01) : o.neg_threshold;
  const W = CHUNK;
  const minSpeech = RATE * o.min_speech_duration_ms / 1000;
  const pad = RATE * o.speech_pad_ms / 1000;
  const maxSpeech = RATE * o.max_speech_duration_s - W - 2 * pad;
  const minSilence = RATE * o.min_silence_duration_ms / 1000;
  const minSilenceAtMax = RATE * o.min_silence_at_max_speech_ms / 1000;
  let triggered = false, tempEnd = 0, prevEnd = 0, nextStart = 0;
  let possibleEnds = [];
  const speeches = [];
  let cur = null;
  for (let i = 0; i < probs.length; i++) {
    const p = probs[i], pos = W * i;
    if (p >= o.threshold && tempEnd) {
      const sil = pos - tempEnd;
      if (sil > minSilenceAtMax) possibleEnds.push([tempEnd, sil]);
      tempEnd = 0;
      if (nextStart < prevEnd) nextStart = pos;
    }
    if (p >= o.threshold && !triggered) {
      triggered = true;
      cur = { start: pos };
      continue;
    }
    if (triggered && pos - cur.start > maxSpeech) {
      if (possibleEnds.length) {
        let pick = possibleEnds[possibleEnds.length - 1];
        if (o.use_max_poss_sil_at_max_speech) {
          pick = possibleEnds[0];
          for (const e of possibleEnds) if (e[1] > pick[1]) pick = e; // first longest
        }
        prevEnd = pick[0];
        const dur = pick[1];
        cur.end = prevEnd;
        speeches.push(cur);
        cur = null;
        nextStart = prevEnd + dur;
        if (nextStart < prevEnd + pos) cur = { start: nextStart };
        else triggered = false;
        possibleEnds = possibleEnds.filter((e) => e[0] > nextStart);
        prevEnd = nextStart = tempEnd = 0;
      } else {
        cur.end = pos;
        speeches.push(cur);
        cur = null;
        prevEnd = nextStart = tempEnd = 0;
        triggered = false;
        possibleEnds = [];
        continue;
      }
    }
    if (p < neg && triggered) {
      if (!tempEnd) tempEnd = pos;
      if (pos - tempEnd < minSilence) continue;
      cur.end = tempEnd;
      if (cur.end - cur.start > minSpeech) speeches.push(cur);
      cur = null;
      prevEnd = nextStart = tempEnd = 0;
      triggered = false;
      possibleEnds = [];
      continue;
    }
  }
  if (cur && length - cur.start > minSpeech) {
    cur.end = length;
    speeches.push(cur);
  }
  for (let i = 0; i < speeches.length; i++) {
    const s = speeches[i];
    if (i === 0) s.start = Math.trunc(Math.max(0, s.start - pad));
    if (i !== speeches.length - 1) {
      const sil = speeches[i + 1].start - s.end;
      if (sil < 2 * pad) {
        s.end += Math.floor(sil / 2);
        speeches[i + 1].start = Math.trunc(Math.max(0, speeches[i + 1].start - Math.floor(sil / 2)));
      } else {
        s.end = Math.trunc(Math.min(length, s.end + pad));
        speeches[i + 1].start = Math.trunc(Math.max(0, speeches[i + 1].start - pad));
      }
    } else {
      s.end = Math.trunc(Math.min(length, s.end + pad));
    }
  }
  return speeches;
}

// toSegments maps 16 kHz offsets to the input rate (rounded, clamped to the
// input length) and adds the confidence: the mean probability of the chunks
// the segment overlaps.
function toSegments(speeches, probs, inRate, inFrames) {
  const map = (x) => Math.min(inFrames, Math.floor((x * inRate + RATE / 2) / RATE));
  return speeches.map((s) => {
    const a = Math.floor(s.start / CHUNK), b = Math.min(probs.length, Math.ceil(s.end / CHUNK));
    let sum = 0;
    for (let i = a; i < b; i++) sum += probs[i];
    return { start_sample: map(s.start), end_sample: map(s.end), confidence: b > a ? sum / (b - a) : 0 };
  });
}

function readF32(file) {
  const b = fs.readFileSync(file);
  return new Float32Array(b.buffer, b.byteOffset, b.length / 4);
}

// Option sets checked for every clip: the defaults, and one that exercises
// the thresholds, padding and the max-speech split.
const VARIANTS = [
  {},
  { threshold: 0.6, neg_threshold: 0.3, min_speech_duration_ms: 100, min_silence_duration_ms: 200,
    speech_pad_ms: 50, max_speech_duration_s: 1.2, min_silence_at_max_speech_ms: 50 },
  { threshold: 0.4, max_speech_duration_s: 1.0, use_max_poss_sil_at_max_speech: false, speech_pad_ms: 0 },
];

async function golden(ortDir, modelPath, prepDir, outFile, clips) {
  const model = await openModel(ortDir, modelPath);
  const result = {
    generator: 'scripts/vad-reference.sh (onnxruntime-node ' + model.ort.env.versions.common + ')',
    model: path.basename(modelPath),
    clips: [],
  };
  for (const clip of clips) {
    const base = path.basename(clip).replace(/\.wav$/, '');
    const meta = JSON.parse(fs.readFileSync(path.join(prepDir, base + '.json'), 'utf8'));
    const samples = readF32(path.join(prepDir, base + '.f32'));
    const probs = await probabilities(model, samples);
    const variants = VARIANTS.map((options) => ({
      options: Object.fromEntries(Object.entries(options).map(([k, v]) => [k, String(v)])),
      segments: toSegments(speechTimestamps(probs, samples.length, options), probs, meta.sample_rate, meta.frames),
    }));
    result.clips.push({ file: path.basename(clip), sample_rate: meta.sample_rate, channels: meta.channels,
      frames: meta.frames, frames_16k: samples.length, probabilities: probs, variants });
    console.error(`${base}: ${probs.length} chunks, ${variants[0].segments.length} segments`);
  }
  fs.writeFileSync(outFile, JSON.stringify(result, null, 1) + '\n');
}

async function bench(ortDir, modelPath, f32, runs) {
  const model = await openModel(ortDir, modelPath);
  const samples = readF32(f32);
  await probabilities(model, samples); // warm-up
  let best = Infinity;
  for (let r = 0; r < runs; r++) {
    const t0 = process.hrtime.bigint();
    await probabilities(model, samples);
    best = Math.min(best, Number(process.hrtime.bigint() - t0) / 1e6);
  }
  const audioS = samples.length / RATE;
  console.log(JSON.stringify({ best_ms: best, audio_s: audioS, rtf: best / 1000 / audioS,
    chunks: Math.ceil(samples.length / CHUNK) }));
}

const [mode, ...args] = process.argv.slice(2);
if (mode === 'golden' && args.length >= 5) {
  await golden(args[0], args[1], args[2], args[3], args.slice(4));
} else if (mode === 'bench' && args.length >= 3) {
  await bench(args[0], args[1], args[2], Number(args[3] || 5));
} else {
  console.error('usage: node vad-reference.mjs golden ORT_DIR MODEL.onnx PREP_DIR OUT.json CLIP...\n' +
    '       node vad-reference.mjs bench ORT_DIR MODEL.onnx CLIP.f32 [RUNS]');
  process.exit(2);
}
