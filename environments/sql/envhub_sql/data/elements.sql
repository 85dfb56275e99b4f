-- The periodic table, from mendeleev's elements.db: elements, their groups and series,
-- isotopes, oxidation states and ionic radii.
CREATE TABLE groups (
    group_id INTEGER PRIMARY KEY,
    symbol TEXT,
    name TEXT
);
CREATE TABLE series (
    series_id INTEGER PRIMARY KEY,
    name TEXT NOT NULL
);
CREATE TABLE elements (
    atomic_number INTEGER PRIMARY KEY,
    symbol TEXT NOT NULL,
    name TEXT NOT NULL,
    atomic_weight REAL,
    period INTEGER NOT NULL,
    group_id INTEGER REFERENCES groups (group_id),
    series_id INTEGER REFERENCES series (series_id),
    block TEXT,
    density REAL,
    melting_point REAL,
    boiling_point REAL,
    atomic_radius REAL,
    electron_affinity REAL,
    en_pauling REAL,
    discovery_year INTEGER,
    discovery_location TEXT,
    is_radioactive INTEGER,
    abundance_crust REAL,
    lattice_structure TEXT,
    goldschmidt_class TEXT
);
CREATE TABLE isotopes (
    isotope_id INTEGER PRIMARY KEY,
    atomic_number INTEGER NOT NULL REFERENCES elements (atomic_number),
    mass_number INTEGER NOT NULL,
    mass REAL,
    abundance REAL,
    is_radioactive INTEGER,
    half_life REAL,
    half_life_unit TEXT,
    discovery_year INTEGER
);
CREATE TABLE oxidation_states (
    oxidation_state_id INTEGER PRIMARY KEY,
    atomic_number INTEGER NOT NULL REFERENCES elements (atomic_number),
    oxidation_state INTEGER NOT NULL,
    category TEXT
);
CREATE TABLE ionic_radii (
    ionic_radius_id INTEGER PRIMARY KEY,
    atomic_number INTEGER NOT NULL REFERENCES elements (atomic_number),
    charge INTEGER NOT NULL,
    coordination TEXT,
    spin TEXT,
    crystal_radius REAL,
    ionic_radius REAL
);
