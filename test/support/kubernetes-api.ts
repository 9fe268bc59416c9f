import { KubeConfig } from '@kubernetes/client-node';

export {
  type FakePod as StandInPod,
  startFakeKubernetesApi as startKubernetesApi,
} from '../../src/testing/fake-kubernetes-api.js';

/** A KubeConfig of the official client pointing at a fake API server. */
export function kubeConfigFor(url: string): KubeConfig {
  const config = new KubeConfig();
  config.loadFromOptions({
    clusters: [{ name: 'stand-in', server: url, skipTLSVerify: true }],
    users: [{ name: 'disagg', token: 'stand-in-token' }],
    contexts: [{ name: 'stand-in', cluster: 'stand-in', user: 'disagg' }],
    currentContext: 'stand-in',
  });
  return config;
}
