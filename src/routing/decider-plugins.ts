// The P/D decider as registered plugins, as llm-d registers its deciders beside its scorers
// (`profilehandler/disagg/decider_plugin.go`: `disaggregate(ctx, request, endpoint)`): each
// answers, once per request, the reason to serve it on decode alone, or nothing to disaggregate
// it. The scheduler asks a pool's deciders in order (`Scheduler.verdict`); the first reason wins.
// A new decider is its function and one entry below, or `registerDecider` from a router's code.
import { describeValue } from '../util/describe-value.js';
import { type PluginSetting, pluginNamed, type RoutingPlugin, readPluginEntry, withDefaults } from './plugin-params.js';
import type { RoutingInput } from './routing-input.js';
import type { LoadView } from './routing-policy.js';
import { type Consumption, mergeConsumption, type RoutingServices } from './services.js';
import type { LatencyPredictor } from './slo/latency-predictor.js';

/**
 * One pool's P/D decider: the reason to serve `input`'s request on decode alone (`'short-prompt'`),
 * or undefined to disaggregate it. It may answer later (a cache lookup); a throw, or a promise
 * that rejects, disaggregates the request (the flow logs it at warn), unless it is a
 * cancellation (`AbortError`).
 *
 * @example
 * const decider: Decider = (input) => (input.promptText.length < 512 ? 'short-prompt' : undefined);
 */
export type Decider = (input: RoutingInput) => string | undefined | PromiseLike<string | undefined>;

/**
 * What a decider may read besides the request: the pool's services its plugin declares (the
 * engines' load for a load-aware one), the pool's workers in rotation, and what the decode
 * pool's policy knows of the caches.
 */
export interface DeciderServices<W> extends RoutingServices<W> {
  /** The pool's prefill workers in rotation now; none without a prefill pool. */
  prefillWorkers?: (() => readonly W[]) | undefined;
  /** The pool's decode workers in rotation now. */
  decodeWorkers?: (() => readonly W[]) | undefined;
  /** The prefill pool's requests under way per worker (this router's, and its peers' where shared). */
  prefillLoad?: LoadView<W> | undefined;
  /** The decode pool's requests under way per worker. */
  decodeLoad?: LoadView<W> | undefined;
  /**
   * The largest share (0 to 1) of `input`'s prompt that the decode pool's policy knows one of
   * its workers in rotation to hold (`RoutingPolicy.cachedShare`: cache-aware's tree,
   * precise-prefix's KV index); undefined where the decode policy knows no caches.
   */
  decodeCachedShare?: ((input: RoutingInput) => number) | undefined;
}

/**
 * What a decider reads, by kind: the data the proxy feeds (as scorers declare it: a load-aware
 * decider declares `engine-load` and gets it), and `decode-caches`, what the decode pool's
 * policy knows of its workers' caches (only a policy that answers `cachedShare` does).
 *
 * @example
 * const consumes: DeciderConsumption = { 'decode-caches': 'required', tokens: 'optional' };
 */
export type DeciderConsumption = Consumption & { readonly 'decode-caches'?: 'required' | 'optional' | undefined };

/**
 * A decider as a plugin: its name (what `routing.deciders` names), when it serves a request on
 * decode alone (for the docs), its parameters, the data it reads, and its factory, called once
 * per pool.
 */
export interface DeciderPlugin extends RoutingPlugin {
  readonly consumes: DeciderConsumption;
  create<W extends { url: string }>(params: Readonly<Record<string, number>>, services: DeciderServices<W>): Decider;
}

/**
 * One decider of a pool as the settings give it.
 *
 * @example
 * const deciders: DeciderSetting[] = [{ name: 'short-prompt', params: { belowChars: 512 } }];
 */
export type DeciderSetting = PluginSetting;

const SHORT_PROMPT: DeciderPlugin = {
  name: 'short-prompt',
  help: 'a prompt (its routing text) shorter than belowChars characters',
  params: [
    {
      name: 'belowChars',
      help: 'characters of routing text below which a prompt is served on decode alone',
      // About 500 tokens: below that, a second request and a KV transfer cost more than decode
      // computing the prompt itself (--aggregate-below-chars sets it, and turns the decider on).
      default: 2048,
      expected: 'a positive whole number',
      valid: (value) => Number.isSafeInteger(value) && value > 0,
    },
  ],
  consumes: {},
  create: (params) => {
    const below = params.belowChars as number;
    return (input) => (input.promptText.length < below ? 'short-prompt' : undefined);
  },
};

const DECODE_CACHED: DeciderPlugin = {
  name: 'decode-cached',
  help: 'a decode worker known, by the decode policy (cache-aware, precise-prefix), to hold more than cachedRatio of the prompt',
  params: [
    {
      name: 'cachedRatio',
      help: 'the share of the prompt (0 to 1) a decode worker must hold, past which the request is served there alone',
      // cache-aware's own threshold for a match (--cache-threshold's default).
      default: 0.5,
      expected: 'a number from 0 to 1',
      valid: (value) => Number.isFinite(value) && value >= 0 && value <= 1,
    },
  ],
  consumes: { 'decode-caches': 'required' },
  create: (params, services) => {
    const ratio = params.cachedRatio as number;
    const share = services.decodeCachedShare;
    // A decode policy of a program's own that knows no caches: nothing to ask (the settings
    // refuse a built-in policy that knows none).
    if (share === undefined) return () => undefined;
    return (input) => (input.promptText !== '' && share(input) > ratio ? 'decode-cached' : undefined);
  },
};

/** `inFlight`, as prefill-busy and predicted-wait (its rule while nothing is predicted) take it. */
const IN_FLIGHT = {
  name: 'inFlight',
  help: 'requests under way on a prefill worker (from this router and its peers, or waiting and running as its engine reports them, whichever is more) past which it counts as busy',
  // Dynamo's max_prefill_queue_size (2): a third request would queue behind a whole prompt.
  default: 2,
  expected: 'a positive whole number',
  valid: (value: number) => Number.isSafeInteger(value) && value > 0,
};

/**
 * Whether every prefill worker in rotation has `busy` requests or more under way (none in
 * rotation: false, so that the scheduler's no-prefill-worker says why).
 */
function everyPrefillBusy<W extends { url: string }>(busy: number, services: DeciderServices<W>): () => boolean {
  const { prefillWorkers, prefillLoad, engineLoad } = services;
  if (prefillWorkers === undefined || prefillLoad === undefined) return () => false;
  return () => {
    const workers = prefillWorkers();
    if (workers.length === 0) return false;
    for (const worker of workers) {
      const engine = engineLoad?.(worker);
      const underWay = Math.max(
        prefillLoad.inFlight(worker),
        engine === undefined ? 0 : engine.waiting + engine.running,
      );
      if (underWay < busy) return false;
    }
    return true;
  };
}

const PREFILL_BUSY: DeciderPlugin = {
  name: 'prefill-busy',
  help: "every prefill worker in rotation has inFlight requests or more under way (Dynamo's isl_or_load: the prompt is computed on decode rather than queued behind them)",
  params: [IN_FLIGHT],
  // The engines' own queues when scraped: another router's requests are there too.
  consumes: { 'engine-load': 'optional' },
  create: (params, services) => {
    const busy = everyPrefillBusy(params.inFlight as number, services);
    return () => (busy() ? 'prefill-busy' : undefined);
  },
};

/**
 * How long `input`'s prompt is predicted to wait on prefill worker `worker` before its own
 * compute: its predicted time to first token with the work ahead of it, less the same on the
 * worker idle; undefined while the worker is not predicted.
 */
function prefillWaitMs<W extends { url: string }>(
  predictor: LatencyPredictor<W>,
  worker: W,
  input: RoutingInput,
  load: LoadView<W>,
): number | undefined {
  const features = predictor.features(worker, input, 'prefill', load);
  const loaded = predictor.predict(worker, features).ttftMs;
  const idle = predictor.predict(worker, { ...features, queue: 0, tokensInFlight: 0 }).ttftMs;
  return loaded === undefined || idle === undefined ? undefined : Math.max(0, loaded - idle);
}

/** The least of the known values, undefined when none is known. */
function leastKnown(values: readonly (number | undefined)[]): number | undefined {
  let least: number | undefined;
  for (const value of values) if (value !== undefined && (least === undefined || value < least)) least = value;
  return least;
}

/**
 * What computing `input`'s prompt on decode worker `worker` is predicted to take to its first
 * token: the decode fit's (its own, else its pool's, learnt from the requests served on decode
 * alone), else, while decode has computed too few prompts to have one, the prefill pool's fit
 * for an idle worker given what `worker` holds cached (the same hardware computing the same
 * tokens; its transfer counted, so that it errs toward disaggregating).
 */
function onDecodeMs<W extends { url: string }>(
  predictor: LatencyPredictor<W>,
  worker: W,
  input: RoutingInput,
  load: LoadView<W> | undefined,
): number | undefined {
  const features = predictor.features(worker, input, 'decode', load);
  return (
    predictor.predict(worker, features).ttftMs ??
    predictor.predictPool('prefill', { ...features, role: 'prefill', queue: 0, tokensInFlight: 0 }).ttftMs
  );
}

const PREDICTED_WAIT: DeciderPlugin = {
  name: 'predicted-wait',
  help: "the prompt's predicted wait on the best prefill worker (the work queued ahead of it there) exceeds the predicted cost of computing it on decode, with what decode holds cached (Dynamo's load-aware decision, on the latency the router learnt); prefill-busy's rule while too little is learnt to predict",
  params: [IN_FLIGHT],
  consumes: { latency: 'required', 'kv-index': 'optional', 'engine-load': 'optional' },
  create: (params, services) => {
    const busy = everyPrefillBusy(params.inFlight as number, services);
    const { prefillWorkers, prefillLoad, decodeWorkers, decodeLoad } = services;
    const predictor = services.latency;
    if (prefillWorkers === undefined || prefillLoad === undefined) return () => undefined;
    // A router of its own that gave no predictor: nothing is ever predicted.
    if (predictor === undefined) return () => (busy() ? 'prefill-busy' : undefined);
    return (input) => {
      const prefill = prefillWorkers();
      if (prefill.length === 0) return undefined;
      const wait = leastKnown(prefill.map((worker) => prefillWaitMs(predictor, worker, input, prefillLoad)));
      const onDecode = leastKnown(
        (decodeWorkers?.() ?? []).map((worker) => onDecodeMs(predictor, worker, input, decodeLoad)),
      );
      if (wait === undefined || onDecode === undefined) return busy() ? 'prefill-busy' : undefined;
      return wait > onDecode ? 'predicted-wait' : undefined;
    };
  },
};

/** Every decider, the built-in ones first: the settings' choices, the help and the pools read this list. */
export const DECIDERS: readonly DeciderPlugin[] = [SHORT_PROMPT, DECODE_CACHED, PREFILL_BUSY, PREDICTED_WAIT];

/** Every built-in decider's name, in the registry's order. */
export const DECIDER_NAMES: readonly string[] = DECIDERS.map((each) => each.name);

/**
 * The plugin named `name`.
 *
 * @example
 * deciderPlugin('decode-cached').consumes; // { 'decode-caches': 'required' }
 *
 * @throws {RangeError} for a name no decider has, with the closest one as a hint.
 */
export function deciderPlugin(name: string): DeciderPlugin {
  return pluginNamed('decider', DECIDERS, name);
}

/**
 * The deciders of `routing.deciders` checked: a list of `{ name, params? }` entries or of names,
 * or names comma-separated (a flag's form); none is an empty list.
 *
 * @example
 * readDeciders('short-prompt,decode-cached'); // [{ name: 'short-prompt' }, { name: 'decode-cached' }]
 *
 * @throws {RangeError} with one line naming the decider and what is wrong with it.
 */
export function readDeciders(value: unknown): DeciderSetting[] {
  const items = typeof value === 'string' ? value.split(',').filter((item) => item.trim() !== '') : value;
  if (!Array.isArray(items)) {
    throw new RangeError(
      `must list deciders (${DECIDERS.map((each) => each.name).join(', ')}), got ${describeValue(value)}`,
    );
  }
  const deciders = items.map((item) =>
    readPluginEntry('decider', DECIDERS, item, 'a decider is a name or { name, params? }'),
  );
  const twice = deciders.find((decider, i) => deciders.findIndex((other) => other.name === decider.name) !== i);
  if (twice !== undefined) throw new RangeError(`names decider ${twice.name} twice`);
  return deciders;
}

/** The routing settings that name a pool's deciders. */
export interface DeciderSettings {
  /** The deciders listed (`routing.deciders`, `--deciders`); none by default. */
  readonly deciders?: readonly DeciderSetting[] | undefined;
  /** `short-prompt` with this `belowChars` (`--aggregate-below-chars`); 0, off, by default. */
  readonly aggregateBelowChars?: number | undefined;
  /** `decode-cached` with this `cachedRatio` (`--aggregate-cached-ratio`); 0, off, by default. */
  readonly aggregateCachedRatio?: number | undefined;
}

/**
 * The deciders of a pool's routing settings, in the order they are asked: those
 * `routing.deciders` names, then `short-prompt` where `aggregateBelowChars` is set and
 * `decode-cached` where `aggregateCachedRatio` is (the settings of before, which turn them on
 * with their parameter), unless listed already (a listed one's own params win).
 *
 * @example
 * decidersOf({ aggregateBelowChars: 64 }); // [{ name: 'short-prompt', params: { belowChars: 64 } }]
 */
export function decidersOf(settings: DeciderSettings): DeciderSetting[] {
  const listed = [...(settings.deciders ?? [])];
  const below = settings.aggregateBelowChars ?? 0;
  const ratio = settings.aggregateCachedRatio ?? 0;
  const implied: DeciderSetting[] = [
    ...(below > 0 ? [{ name: 'short-prompt', params: { belowChars: below } }] : []),
    ...(ratio > 0 ? [{ name: 'decode-cached', params: { cachedRatio: ratio } }] : []),
  ];
  for (const setting of implied) {
    const at = listed.findIndex((each) => each.name === setting.name);
    if (at === -1) listed.push(setting);
    else listed[at] = { name: setting.name, params: { ...setting.params, ...listed[at]?.params } };
  }
  return listed;
}

/**
 * What the deciders of `settings` read, together.
 *
 * @example
 * decidersConsume([{ name: 'decode-cached' }])['decode-caches']; // 'required'
 */
export function decidersConsume(settings: readonly DeciderSetting[]): DeciderConsumption {
  const each = settings.map((setting) => deciderPlugin(setting.name).consumes);
  const caches = each.map((consumes) => consumes['decode-caches']);
  const merged = mergeConsumption(each);
  const need = caches.includes('required') ? 'required' : caches.includes('optional') ? 'optional' : undefined;
  return need === undefined ? merged : { ...merged, 'decode-caches': need };
}

/**
 * One pool's decider from `settings`: each plugin made with its parameters (defaults filled),
 * asked in order, the first reason answering; undefined when the settings name none. It
 * answers at once while every decider asked does, so that a pool of synchronous deciders
 * costs no wait.
 *
 * @example
 * const decider = decidersFrom([{ name: 'short-prompt', params: { belowChars: 64 } }], {});
 * decider?.(new RoutingInput({ prompt: 'Hi' })); // 'short-prompt'
 */
export function decidersFrom<W extends { url: string }>(
  settings: readonly DeciderSetting[],
  services: DeciderServices<W> = {},
): Decider | undefined {
  if (settings.length === 0) return undefined;
  const deciders = settings.map((setting) => {
    const plugin = deciderPlugin(setting.name);
    return plugin.create<W>(withDefaults(plugin, setting.params), services);
  });
  return (input) => firstReason(deciders, input, 0);
}

/** The first reason of `deciders` from `from` on, waiting only for a decider that answers later. */
function firstReason(
  deciders: readonly Decider[],
  input: RoutingInput,
  from: number,
): string | undefined | PromiseLike<string | undefined> {
  for (let i = from; i < deciders.length; i++) {
    const answer = (deciders[i] as Decider)(input);
    if (isThenable(answer)) {
      return Promise.resolve(answer).then((reason) => reasonOf(reason) ?? firstReason(deciders, input, i + 1));
    }
    const reason = reasonOf(answer);
    if (reason !== undefined) return reason;
  }
  return undefined;
}

/**
 * A decider's answer as a reason: a non-empty string, else undefined (disaggregate).
 *
 * @example
 * reasonOf('short-prompt'); // 'short-prompt'
 * reasonOf(''); // undefined
 */
export function reasonOf(answer: unknown): string | undefined {
  return typeof answer === 'string' && answer !== '' ? answer : undefined;
}

/** Whether `value` is a promise, or anything else with a `then` (a decider's later answer). */
export function isThenable(value: unknown): value is PromiseLike<unknown> {
  return (
    (typeof value === 'object' || typeof value === 'function') &&
    value !== null &&
    typeof (value as { then?: unknown }).then === 'function'
  );
}
