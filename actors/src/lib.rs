//! hipObject concurrent core (to be written).
