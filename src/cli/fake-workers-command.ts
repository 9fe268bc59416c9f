// `disagg fake-workers`: fake prefill and decode workers (and, asked, a fake Kubernetes API
// listing them as pods) to try `disagg serve` without a GPU. Loaded by the command only when
// asked, so that `disagg serve` does not load the fakes.
import { rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { EngineProfile } from '../simulation/profile-types.js';
import { PROFILES, ProfileError, profileSummary, readProfile } from '../simulation/profiles.js';
import { type FakeKubernetesApi, fakeKubeconfig, startFakeKubernetesApi } from '../testing/fake-kubernetes-api.js';
import {
  FAKE_POD_APP,
  FAKE_WORKERS_USAGE,
  FakeWorkersUsageError,
  fakePods,
  kubernetesServeCommand,
  parseFakeWorkersArgs,
  podHost,
  serveCommand,
  startFakeFleet,
} from './fake-workers.js';

/** Runs `disagg fake-workers <args>` until SIGTERM or SIGINT; resolves with the exit code. */
export async function fakeWorkers(args: string[]): Promise<number> {
  let plan: ReturnType<typeof parseFakeWorkersArgs>;
  try {
    plan = parseFakeWorkersArgs(args);
  } catch (error) {
    if (!(error instanceof FakeWorkersUsageError)) throw error;
    console.error(`disagg fake-workers: ${error.message}`);
    console.error("See 'disagg fake-workers --help'.");
    return 2;
  }
  if (plan === 'help') {
    console.log(FAKE_WORKERS_USAGE);
    return 0;
  }
  if (plan === 'list-profiles') {
    for (const profile of PROFILES.values()) console.log(profileSummary(profile));
    return 0;
  }
  let profile: EngineProfile | undefined;
  try {
    profile = plan.profile === undefined ? undefined : await readProfile(plan.profile);
  } catch (error) {
    if (!ProfileError.is(error)) throw error;
    console.error(`disagg fake-workers: ${error.message}`);
    return 2;
  }
  let fleet: Awaited<ReturnType<typeof startFakeFleet>>;
  try {
    fleet = await startFakeFleet(plan, profile);
  } catch (error) {
    const code = (error as { code?: unknown }).code;
    if (code === 'ERR_MODULE_NOT_FOUND' && plan.kvEventsPort !== undefined) {
      console.error('disagg fake-workers: --kv-events needs the optional dependency zeromq: npm install zeromq@6');
      return 1;
    }
    if (code !== 'EADDRINUSE' && code !== 'EACCES' && code !== 'EADDRNOTAVAIL') throw error;
    console.error(
      `disagg fake-workers: cannot listen (${String(code)}): ${(error as Error).message}; choose other ports with --prefill-port and --decode-port${plan.kvEventsPort === undefined ? '' : ' (and --kv-events-port)'}`,
    );
    return 1;
  }
  for (const worker of [...fleet.prefill, ...fleet.decode]) {
    const kv = worker.kvCache?.publisher;
    const events = kv === undefined ? '' : `, KV events at ${kv.endpoint} (replay ${kv.replayEndpoint})`;
    const simulated = profile === undefined ? '' : `, simulating ${profile.name} at ${plan.speedup}x`;
    console.log(`fake ${plan.protocol} ${worker.role} worker at ${worker.url}${events}${simulated}`);
  }
  let path: string | undefined;
  let api: FakeKubernetesApi | undefined;
  if (plan.kubernetesPort !== undefined) {
    try {
      api = await startFakeKubernetesApi({ host: podHost(plan.host), port: plan.kubernetesPort });
    } catch (error) {
      await Promise.all([...fleet.prefill, ...fleet.decode].map((worker) => worker.close()));
      console.error(
        `disagg fake-workers: the fake Kubernetes API cannot listen (${String((error as { code?: unknown }).code)}); choose another --kubernetes-port`,
      );
      return 1;
    }
    for (const pod of fakePods(plan, fleet)) api.apply(pod);
    path = join(tmpdir(), `disagg-fake-kubeconfig-${process.pid}`);
    writeFileSync(path, fakeKubeconfig(api.url));
    console.log(`fake Kubernetes API at ${api.url}: the workers as pods labelled app=${FAKE_POD_APP}`);
    console.log(`\nIn another terminal:\n  ${kubernetesServeCommand(plan, path)}`);
  } else {
    const { command, configFile } = serveCommand(plan, fleet);
    path = configFile === undefined ? undefined : join(tmpdir(), `disagg-fake-workers-${process.pid}.yaml`);
    if (path === undefined) console.log(`\nIn another terminal:\n  ${command}`);
    else {
      writeFileSync(path, configFile as string);
      console.log(`\nIn another terminal:\n  ${command} ${path}`);
    }
  }
  console.log('Ctrl-C stops the workers.');
  await new Promise<void>((resolve) => {
    const stop = () => {
      process.off('SIGTERM', stop);
      process.off('SIGINT', stop);
      resolve();
    };
    process.on('SIGTERM', stop);
    process.on('SIGINT', stop);
  });
  await api?.close();
  await Promise.all([...fleet.prefill, ...fleet.decode].map((worker) => worker.close()));
  if (path !== undefined) rmSync(path, { force: true });
  return 0;
}
