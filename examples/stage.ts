// A stage of your own in the proxy's request pipeline: every API request must name its team
// (`x-team`), refused with a 400 in the API's own error shape before any worker otherwise, and
// each team's generated tokens are counted once its answer is over. The endpoint picker
// (`startEndpointPicker`) takes the same stage with its own `addStage`.
import { createProxy, type Stage } from 'disagg/server';
import { startFakeWorker } from 'disagg/testing';

const prefill = await startFakeWorker({ role: 'prefill', protocol: 'vllm' });
const decode = await startFakeWorker({ role: 'decode', protocol: 'vllm', tokens: 3 });
const proxy = createProxy({ connector: 'vllm', prefill: [{ url: prefill.url }], decode: [{ url: decode.url }] });

const generated = new Map<string, number>();
const teams: Stage = {
  name: 'teams',
  run: (request) => {
    const team = request.headers['x-team'];
    if (typeof team !== 'string' || team === '') {
      const error = { message: 'Name your team in x-team', type: 'invalid_request_error', param: null, code: null };
      return { refused: { status: 400, body: { error } } };
    }
    return {
      // Once the request is over, with what its answer said it used.
      after: (done) => generated.set(team, (generated.get(team) ?? 0) + (done.usage?.completion_tokens ?? 0)),
    };
  },
};
proxy.addStage(teams);
const url = await proxy.listen(0, '127.0.0.1');

const ask = (headers: Record<string, string>) =>
  fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify({ model: 'fake-model', prompt: 'Hello', max_tokens: 3 }),
  });
const refused = await ask({});
console.log(refused.status, ((await refused.json()) as { error: { message: string } }).error.message);
for (const team of ['search', 'search', 'ads']) await (await ask({ 'x-team': team })).text();
console.log(Object.fromEntries(generated));

await proxy.close({ drainDelayMs: 0, gracePeriodMs: 0 });
await Promise.all([prefill.close(), decode.close()]);
