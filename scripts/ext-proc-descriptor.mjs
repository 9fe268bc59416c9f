// Writes src/epp/ext-proc-descriptor.json: Envoy's ext_proc protos (vendored under proto/) as
// protobufjs JSON, which @grpc/proto-loader's `fromJSON` loads without reading a .proto file
// at run time (the same import works from src/, dist/ and a bundle). Run after changing proto/:
//   node scripts/ext-proc-descriptor.mjs
// test/epp/ext-proc-descriptor.test.ts fails while the JSON and the protos differ.
import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { extProcDescriptor } from './ext-proc-json.mjs';

const target = fileURLToPath(new URL('../src/epp/ext-proc-descriptor.json', import.meta.url));
writeFileSync(target, `${JSON.stringify(extProcDescriptor(), null, 2)}\n`);
console.log(`wrote ${target}`);
