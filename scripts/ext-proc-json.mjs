// Envoy's ext_proc protos (proto/, Apache-2.0, Copyright Envoy Project Authors) as protobufjs
// JSON: what scripts/ext-proc-descriptor.mjs writes into src/epp/ext-proc-descriptor.json, and
// what its test compares that file with.
import { fileURLToPath } from 'node:url';
import protobuf from 'protobufjs';

const PROTO_ROOT = fileURLToPath(new URL('../proto/', import.meta.url));

/** The descriptor of envoy/service/ext_proc/v3/external_processor.proto and its imports. */
export function extProcDescriptor() {
  const root = new protobuf.Root();
  // Envoy's own files from proto/; google/protobuf/* from protobufjs's bundled copies.
  root.resolvePath = (_origin, target) => (target.startsWith('google/protobuf/') ? target : `${PROTO_ROOT}${target}`);
  root.loadSync('envoy/service/ext_proc/v3/external_processor.proto', { keepCase: true });
  root.resolveAll();
  return root.toJSON({ keepComments: false });
}
