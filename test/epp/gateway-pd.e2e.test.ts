// P/D as a Gateway API fleet runs it: a gateway (the scripted Envoy) asks `disagg epp` which
// pods serve a request, sends it to the decode pod's sidecar (`disagg sidecar`), which runs the
// prefill leg on the pod the picker named and decodes locally.
import { afterEach, describe, expect, it } from 'vitest';
import { startEndpointPicker } from '../../src/epp/epp-server.js';
import { createProxy, type ProxyServer } from '../../src/server/proxy.js';
import { recordingLogger } from '../support/async.js';
import { envoyStandIn, throughGateway } from '../support/envoy-stand-in.js';
import { fakeWorkers } from '../support/http.js';

const fakes = fakeWorkers();
const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  await Promise.all(cleanups.splice(0).map((cleanup) => cleanup()));
});

/** Two prefill pods; two decode pods, each a fake vLLM behind its own sidecar; the picker over them. */
async function fleet() {
  const prefill = [
    await fakes.start({ role: 'prefill', protocol: 'vllm' }),
    await fakes.start({ role: 'prefill', protocol: 'vllm' }),
  ];
  const decode = [
    await fakes.start({ role: 'decode', protocol: 'vllm', tokens: 3 }),
    await fakes.start({ role: 'decode', protocol: 'vllm', tokens: 3 }),
  ];
  const sidecars: ProxyServer[] = decode.map((worker) =>
    createProxy({
      connector: 'vllm',
      decode: [{ url: worker.url }],
      sidecar: { prefillFrom: 'header', prefillAllow: ['127.0.0.0/8'] },
      logger: recordingLogger().logger,
    }),
  );
  const sidecarUrls = await Promise.all(sidecars.map((sidecar) => sidecar.listen(0)));
  cleanups.push(() => Promise.all(sidecars.map((sidecar) => sidecar.close({ gracePeriodMs: 0, drainDelayMs: 0 }))));
  const epp = await startEndpointPicker(
    {
      connector: 'vllm',
      prefill: prefill.map((worker) => ({ url: worker.url })),
      decode: sidecarUrls.map((url) => ({ url })),
      selection: 'round-robin',
      logger: recordingLogger().logger,
    },
    { port: 0, healthPort: 0, metricsPort: 0, host: '127.0.0.1' },
  );
  const envoy = envoyStandIn(epp.ports.extProc);
  cleanups.push(
    () => epp.close({ drainDelayMs: 0, gracePeriodMs: 0 }),
    () => envoy.close(),
  );
  return { prefill, decode, sidecarUrls, epp, envoy };
}

describe('P/D through a gateway, disagg epp and disagg sidecar', () => {
  it('serves each request by a picked prefill pod and the picked decode pod, the stream relayed whole, no KV left', async () => {
    const { prefill, decode, sidecarUrls, epp, envoy } = await fleet();
    for (let i = 0; i < 2; i++) {
      const body = JSON.stringify({
        model: 'fake-model',
        messages: [{ role: 'user', content: `Hello ${i}` }],
        max_tokens: 3,
        stream: true,
        stream_options: { include_usage: true },
      });
      const result = await throughGateway(envoy, '/v1/chat/completions', body);
      expect(result.status).toBe(200);
      // Round-robin on both sides: request i on prefill i and decode pod i.
      expect(result.destination).toBe(new URL(sidecarUrls[i] as string).host);
      expect(result.prefiller).toBe(new URL(prefill[i]?.url as string).host);
      const text = (result.text ?? '')
        .split('\n')
        .filter((line) => line.startsWith('data: {'))
        .map((line) => JSON.parse(line.slice(6)).choices[0]?.delta?.content ?? '')
        .join('');
      expect(text).toBe('tok0 tok1 tok2 ');
      expect(result.text).toMatch(/data: \[DONE\]/);
      expect(prefill[i]?.requests.at(-1)?.body).toMatchObject({ max_tokens: 1, stream: false });
      expect(decode[i]?.requests.filter((call) => call.path === '/v1/chat/completions')).toHaveLength(1);
    }
    // Every lease is back once the answers ended.
    const pool = epp.core.pools.all()[0];
    expect(epp.core.pools.workers('prefill').map((worker) => pool?.prefill.inFlight(worker))).toEqual([0, 0]);
    expect(epp.core.pools.workers('decode').map((worker) => pool?.decode.inFlight(worker))).toEqual([0, 0]);
  });
});
