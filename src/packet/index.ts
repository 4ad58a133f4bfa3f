// Public face of the packet layer: for now, the network_transit field set.
export { TRANSIT_SCHEME } from './fields.js';
