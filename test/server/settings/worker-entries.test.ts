// A worker entry's labels, read into the worker's attributes: from a settings file's lists and
// its pools, from the admin API and discovery (checkWorker), with an SGLang entry's dpRank as
// its well-known attribute.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { WORKER_ATTRIBUTES } from '../../../src/routing/worker-attributes.js';
import { loadServeConfig, type ServeConfig } from '../../../src/server/config.js';
import { ConfigError } from '../../../src/server/config-error.js';
import { parseDecodeWorkers, parsePrefillWorkers } from '../../../src/server/settings/worker-entries.js';
import { checkWorker } from '../../../src/server/settings/workers.js';

const file = (settings: Record<string, unknown>) => {
  const path = join(mkdtempSync(join(tmpdir(), 'disagg-labels-')), 'disagg.yaml');
  writeFileSync(path, stringify(settings));
  return path;
};

describe("a worker entry's labels", () => {
  it("a label from a config entry reaches the worker's attributes, in the top-level lists and a pool's", () => {
    const options = loadServeConfig(
      [
        '--config',
        file({
          connector: 'vllm',
          prefill: [{ url: 'http://p:8000', labels: { 'disagg.ai/revision': 'v2', zone: 'a' } }],
          decode: ['http://d:8000'],
          pools: [{ model: 'small', decode: [{ url: 'http://s:8000', labels: { 'disagg.ai/revision': 'v1' } }] }],
        }),
      ],
      {},
    ) as ServeConfig;
    expect(options.prefill).toEqual([{ url: 'http://p:8000', attributes: { 'disagg.ai/revision': 'v2', zone: 'a' } }]);
    // Given, not kept: what routing reads is the attribute map.
    expect(options.prefill?.[0]).not.toHaveProperty('labels');
    expect(options.decode).toEqual([{ url: 'http://d:8000' }]);
    expect(options.pools?.[0]?.decode).toEqual([{ url: 'http://s:8000', attributes: { 'disagg.ai/revision': 'v1' } }]);
  });

  it('an entry read twice (disagg serve reads its file, then the proxy its options) keeps its attributes', () => {
    const once = parseDecodeWorkers([{ url: 'http://d:8000', labels: { 'disagg.ai/revision': 'v2' } }]);
    expect(parseDecodeWorkers(once)).toEqual(once);
    expect(parsePrefillWorkers(parsePrefillWorkers([{ url: 'http://p:8000', dpRank: 0 }]))).toEqual([
      { url: 'http://p:8000', dpRank: 0, attributes: { [WORKER_ATTRIBUTES.dpRank]: '0' } },
    ]);
  });

  it('a worker added at run time (the admin API, discovery) carries its labels the same way', () => {
    expect(
      checkWorker(
        'decode',
        { url: 'http://d:8000', labels: { 'disagg.ai/revision': 'v2' } },
        {
          connector: 'vllm',
          bootstrapPort: 8998,
        },
      ),
    ).toEqual({ url: 'http://d:8000', attributes: { [WORKER_ATTRIBUTES.revision]: 'v2' } });
  });

  it("an SGLang prefill entry's dpRank is its dp-rank attribute; labels that say another rank are refused", () => {
    expect(parsePrefillWorkers([{ url: 'http://p:8000', dpRank: 1, dpSize: 2 }])).toEqual([
      { url: 'http://p:8000', dpRank: 1, dpSize: 2, attributes: { [WORKER_ATTRIBUTES.dpRank]: '1' } },
    ]);
    expect(() =>
      parsePrefillWorkers([{ url: 'http://p:8000', dpRank: 1, labels: { [WORKER_ATTRIBUTES.dpRank]: '0' } }]),
    ).toThrow('has a worker whose label disagg.ai/dp-rank is "0" but whose dpRank is 1 (http://p:8000): give one');
  });

  it('labels are a mapping of keys to text: anything else is refused with the label named', () => {
    expect(() => parseDecodeWorkers([{ url: 'http://d:8000', labels: ['v2'] }])).toThrow(
      'has a worker whose labels are not a mapping of keys to text: ["v2"]',
    );
    expect(() => parseDecodeWorkers([{ url: 'http://d:8000', labels: { 'disagg.ai/revision': 2 } }])).toThrow(
      'has a worker whose label "disagg.ai/revision" is not text: 2',
    );
    expect(() => parseDecodeWorkers([{ url: 'http://d:8000', labels: { '': 'x' } }])).toThrow(
      'has a worker with a label without a key: {"":"x"}',
    );
    // In a file, the refusal names the setting.
    expect(() =>
      loadServeConfig(
        ['--config', file({ connector: 'vllm', prefill: ['http://p'], decode: [{ url: 'http://d', labels: 'v2' }] })],
        {},
      ),
    ).toThrow(ConfigError);
  });
});
