// Public face of the packet layer: the network_transit field set, the
// allocation-free frame decoder that fills it, the header layouts (LAYOUT),
// and checkCopies for hot modules elsewhere that copy its constants as literals.
export { TRANSIT_SCHEME } from './fields.js';
export { decode, decodeGeneral, SUPPORTED_LINKTYPES } from './decode.js';
export { clearDecoded } from './clear.js';
export { PacketInfo, ST_IP, ST_TRUNCATED, ST_MALFORMED, ST_FRAGMENT, ST_UNSUPPORTED_LINK } from './view.js';
export { planFor, FULL_PLAN, type DecodePlan } from './plan.js';
export { LINKTYPE, PROTO_NAMES } from './constants.js';
export { isSip } from './sip.js';
export { fastFrame } from './fast.js';
export { checkCopies } from './literal.js';
export * as FIELD_SLOTS from './slots.js';
export * as LAYOUT from './layout.js';
