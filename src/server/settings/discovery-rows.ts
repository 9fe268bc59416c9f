// Workers found at run time: DNS names re-resolved, or Kubernetes pods watched.
import { DNS_INTERVAL_MS } from '../../discovery/dns-discovery.js';
import { dnsUrl, port, positiveMs, text } from './parsers.js';
import { inGroup, row } from './setting.js';

/** The settings of `--help`'s Discovery group. */
export const DISCOVERY_ROWS = inGroup('Discovery', [
  ...(['prefill', 'decode'] as const).map((role) =>
    row({
      key: `discovery.${role}Dns` as const,
      flag: `${role}-dns`,
      arg: 'URL',
      help: `${role} workers from DNS: each address the URL's host resolves to is a worker on its port; re-resolved every --dns-interval-ms, vanished ones drain`,
      parse: dnsUrl,
    }),
  ),
  ...(['prefill', 'decode'] as const).map((role) =>
    row({
      key: `discovery.${role}Selector` as const,
      flag: `${role}-selector`,
      arg: 'LABELS',
      help: `${role} workers from Kubernetes: the ready pods matching this label selector (app=sglang,role=${role}), watched; needs @kubernetes/client-node`,
      parse: text,
    }),
  ),
  {
    key: 'discovery.inferencePool',
    flag: 'inference-pool',
    arg: 'NAME',
    help: "the decode pods are this Gateway API InferencePool's (inference.networking.k8s.io/v1, in --k8s-namespace): its selector, and its target ports as each pod's workers (several: data-parallel ranks); read when discovery starts",
    shownDefault: 'none',
    parse: text,
  },
  {
    key: 'discovery.namespace',
    flag: 'k8s-namespace',
    arg: 'NAME',
    help: 'the namespace --prefill-selector and --decode-selector watch (every namespace without one: needs a ClusterRole)',
    shownDefault: 'all',
    parse: text,
  },
  {
    key: 'discovery.port',
    flag: 'k8s-port',
    arg: 'N',
    help: "the workers' HTTP port on each discovered pod",
    default: 8000,
    parse: port,
  },
  ...(['prefill', 'decode'] as const).map((role) =>
    row({
      key: `discovery.${role}Port` as const,
      flag: `k8s-${role}-port`,
      arg: 'N',
      help: `the ${role} pods' HTTP port, when the roles listen on different ports (else --k8s-port)`,
      shownDefault: '--k8s-port',
      parse: port,
    }),
  ),
  {
    key: 'discovery.bootstrapPortAnnotation',
    flag: 'bootstrap-port-annotation',
    arg: 'KEY',
    help: "SGLang: the pod annotation with a discovered prefill worker's bootstrap port, or one per worker port, comma-separated (else --bootstrap-port)",
    default: 'sglang.ai/bootstrap-port',
    parse: text,
  },
  {
    key: 'discovery.workerPortsAnnotation',
    flag: 'worker-ports-annotation',
    arg: 'KEY',
    help: 'the pod annotation listing the HTTP ports of a pod that serves several workers, comma-separated (else one worker on --k8s-port)',
    default: 'smg.ai/worker-ports',
    parse: text,
  },
  {
    key: 'discovery.dnsIntervalMs',
    flag: 'dns-interval-ms',
    arg: 'MS',
    help: 'how often --prefill-dns and --decode-dns are resolved again',
    default: DNS_INTERVAL_MS,
    parse: positiveMs,
  },
]);
