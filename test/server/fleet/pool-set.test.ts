import { describe, expect, it } from 'vitest';
import { endpointNamed } from '../../../src/endpoints/registry.js';
import { sglangBootstrap, vllmNixl } from '../../../src/engines/registry.js';
import { Scheduler } from '../../../src/routing/scheduler.js';
import { WorkerPool } from '../../../src/routing/worker-pool.js';
import type { HealthChecker } from '../../../src/server/fleet/health.js';
import { Membership } from '../../../src/server/fleet/membership.js';
import { ModelRewrites } from '../../../src/server/fleet/model-rewrites.js';
import { type ModelPool, PoolSet } from '../../../src/server/fleet/pool-set.js';
import { ProxyMetrics } from '../../../src/server/observability/metrics.js';
import { parseStage, resolveStage } from '../../../src/server/pipeline/body-stages.js';
import type { ProxyState } from '../../../src/server/pipeline/proxy-state.js';
import { RequestContext } from '../../../src/server/pipeline/request-context.js';
import { enterStages } from '../../../src/server/pipeline/stage.js';
import type { ProxyDecodeWorker, ProxyPrefillWorker } from '../../../src/server/settings/worker-entries.js';
import { recordingLogger } from '../../support/async.js';
import { bodyExchange } from '../../support/exchange.js';

/** A pool of one prefill and one decode worker, serving `model` (undefined: any model). */
function poolOf(model: string | undefined, at: number, engine: 'vllm' | 'sglang' = 'vllm'): ModelPool {
  const prefill = new WorkerPool<ProxyPrefillWorker>([{ url: `http://10.0.${at}.1:8100` }]);
  const decode = new WorkerPool<ProxyDecodeWorker>([{ url: `http://10.0.${at}.2:8200` }]);
  return {
    model,
    engine,
    connector: engine === 'vllm' ? vllmNixl : sglangBootstrap,
    prefill,
    decode,
    scheduler: new Scheduler({ prefillWorkers: prefill, decodeWorkers: decode }),
  };
}

describe('PoolSet', () => {
  it('answers every model with the one pool that serves any model', () => {
    const only = poolOf(undefined, 0);
    const pools = new PoolSet([only]);
    expect(pools.poolFor('llama')).toBe(only);
    expect(pools.poolFor(undefined)).toBe(only);
    expect(pools.poolFor(42)).toBe(only);
    expect(pools.all()).toEqual([only]);
  });

  it('keys pools by model, each with its own engine; a model no pool serves has none', () => {
    const llama = poolOf('llama', 1);
    const qwen = poolOf('qwen', 2, 'sglang');
    const pools = new PoolSet([llama, qwen]);
    expect(pools.poolFor('llama')).toBe(llama);
    expect(pools.poolFor('qwen')?.connector).toBe(sglangBootstrap);
    expect(pools.poolFor('mistral')).toBeUndefined();
    expect(pools.poolFor(undefined)).toBeUndefined();
    expect(pools.workers('decode').map((worker) => worker.url)).toEqual([
      'http://10.0.1.2:8200',
      'http://10.0.2.2:8200',
    ]);
    expect(pools.sides().map(({ role }) => role)).toEqual(['prefill', 'decode', 'prefill', 'decode']);
    expect(pools.workerPools()).toHaveLength(4);
    const worker = qwen.prefill.workers[0] as ProxyPrefillWorker;
    expect(pools.poolOf(worker)).toEqual({ pool: qwen, role: 'prefill' });
    expect(pools.poolOf({ url: 'http://elsewhere' })).toBeUndefined();
    // A pool that serves any model answers the models the others do not name.
    const any = poolOf(undefined, 3);
    expect(new PoolSet([llama, any]).poolFor('mistral')).toBe(any);
  });

  it('refuses two pools of one model, and two that serve any model', () => {
    expect(() => new PoolSet([poolOf('llama', 1), poolOf('llama', 2)])).toThrow(/Two pools serve the model "llama"/);
    expect(() => new PoolSet([poolOf(undefined, 1), poolOf(undefined, 2)])).toThrow(/Two pools serve any model/);
  });

  it('membership names workers across pools and changes a worker in its own pool', async () => {
    const llama = poolOf('llama', 1);
    const qwen = poolOf('qwen', 2);
    const { logger } = recordingLogger();
    const health = { admit: async () => true, forget: () => {}, lastFailure: () => ({}) };
    const membership = new Membership(new PoolSet([llama, qwen]), health as unknown as HealthChecker, logger);
    expect(membership.list().decode.map((view) => view.name)).toEqual(['decode-0', 'decode-1']);
    const found = membership.find('decode-1');
    expect(found?.worker).toBe(qwen.decode.workers[0]);
    membership.drain('decode', found?.worker as ProxyDecodeWorker, 'admin');
    expect(qwen.decode.workers).toHaveLength(0);
    expect(llama.decode.workers).toHaveLength(1);
  });

  it('sums the pool gauges of a role over the pools', async () => {
    const metrics = new ProxyMetrics(new PoolSet([poolOf('llama', 1), poolOf('qwen', 2)]));
    const workers = (await metrics.registry.getMetricsAsJSON()).find((metric) => metric.name === 'disagg_workers');
    const ready = workers?.values.filter((value) => value.labels.state === 'ready').map((value) => value.value);
    expect(ready).toEqual([2, 2]);
  });
});

describe('a model no pool serves', () => {
  it('is a 404 model_not_found in the body stage, before any worker', async () => {
    const pools = new PoolSet([poolOf('llama', 1), poolOf('qwen', 2)]);
    const { logger } = recordingLogger();
    const proxy = {
      options: { maxBodyBytes: 1 << 20, routing: { sessionHeader: 'x-session-id' } },
      models: { maxModelLen: () => undefined },
      rewrites: new ModelRewrites([]),
      pools,
      logger,
    } as unknown as ProxyState;
    const serve = (model: string) =>
      new RequestContext(proxy, endpointNamed('completions'), bodyExchange(JSON.stringify({ model, prompt: 'Hi' })));
    const stages = [parseStage, resolveStage];

    const refused = serve('mistral');
    expect(await enterStages(refused, stages)).toMatchObject({
      refused: {
        status: 404,
        body: {
          error: {
            message: "The model 'mistral' does not exist: this router serves llama, qwen",
            type: 'invalid_request_error',
            param: 'model',
            code: 'model_not_found',
          },
        },
      },
    });
    const served = serve('qwen');
    expect((await enterStages(served, stages)).refused).toBeUndefined();
    expect(served.pool).toBe(pools.poolFor('qwen'));
    expect(pools.all().every((pool) => pool.decode.inFlight(pool.decode.workers[0] as ProxyDecodeWorker) === 0)).toBe(
      true,
    );
  });
});
