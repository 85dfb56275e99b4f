-- nycflights13: flights that departed New York City (JFK, LGA, EWR) in January 2013.
CREATE TABLE airlines (
    carrier TEXT PRIMARY KEY,
    name TEXT NOT NULL
);
CREATE TABLE airports (
    faa TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    lat REAL,
    lon REAL,
    alt INTEGER,
    tz INTEGER,
    dst TEXT,
    tzone TEXT
);
CREATE TABLE planes (
    tailnum TEXT PRIMARY KEY,
    year INTEGER,
    type TEXT,
    manufacturer TEXT,
    model TEXT,
    engines INTEGER,
    seats INTEGER,
    speed INTEGER,
    engine TEXT
);
CREATE TABLE weather (
    origin TEXT NOT NULL REFERENCES airports (faa),
    year INTEGER NOT NULL,
    month INTEGER NOT NULL,
    day INTEGER NOT NULL,
    hour INTEGER NOT NULL,
    temp REAL,
    dewp REAL,
    humid REAL,
    wind_dir INTEGER,
    wind_speed REAL,
    wind_gust REAL,
    precip REAL,
    pressure REAL,
    visib REAL,
    time_hour TEXT NOT NULL,
    PRIMARY KEY (origin, time_hour)
);
CREATE TABLE flights (
    flight_id INTEGER PRIMARY KEY,
    year INTEGER NOT NULL,
    month INTEGER NOT NULL,
    day INTEGER NOT NULL,
    dep_time INTEGER,
    sched_dep_time INTEGER NOT NULL,
    dep_delay INTEGER,
    arr_time INTEGER,
    sched_arr_time INTEGER NOT NULL,
    arr_delay INTEGER,
    carrier TEXT NOT NULL REFERENCES airlines (carrier),
    flight INTEGER NOT NULL,
    tailnum TEXT,
    origin TEXT NOT NULL REFERENCES airports (faa),
    dest TEXT NOT NULL REFERENCES airports (faa),
    air_time INTEGER,
    distance INTEGER NOT NULL,
    hour INTEGER NOT NULL,
    minute INTEGER NOT NULL,
    time_hour TEXT NOT NULL
);
CREATE INDEX flights_carrier ON flights (carrier);
CREATE INDEX flights_origin ON flights (origin);
CREATE INDEX flights_dest ON flights (dest);
CREATE INDEX flights_tailnum ON flights (tailnum);
