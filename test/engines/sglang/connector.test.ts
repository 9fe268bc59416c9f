import { describe, expect, it } from 'vitest';
import { sglangBootstrap } from '../../../src/engines/registry.js';

describe('the sglang-bootstrap connector', () => {
  it("mints the rendezvous from the prefill worker's entry; one without a bootstrap port is a TypeError naming the connector", () => {
    expect(sglangBootstrap.rendezvous?.({ url: 'http://p0:30000', bootstrapPort: 8998 }, 1)).toEqual({
      bootstrap_host: 'p0',
      bootstrap_port: 8998,
      bootstrap_room: expect.any(BigInt),
    });
    expect(() => sglangBootstrap.rendezvous?.({ url: 'http://p0:30000' }, 1)).toThrow(
      "The sglang-bootstrap connector sends both legs at once and needs the prefill worker's rendezvous",
    );
  });
});
